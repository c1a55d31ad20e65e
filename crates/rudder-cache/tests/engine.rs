//! The list/watch engine against a real API server: consistent lists on any client, a
//! dropped watch resumed without a list, a silent watch dropped and resumed.
//! (410 Gone -> relist is in `informer.rs`, which needs a control plane of its own; a
//! resource not served, then installed, in `lifetimes.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::pin::pin;
use std::time::Duration;

use common::{WatchGate, config_map};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use rudder_cache::watch::{self, Event};
use rudder_cache::{Informer, ListStrategy};
use rudder_envtest::TestEnv;
use rudder_envtest::poll::until;

const WAIT: Duration = Duration::from_secs(30);

/// Whether `request` lists: a streaming list's watch, or a GET of the collection.
fn lists(request: &str) -> bool {
    let watch = request.contains("watch=true");
    (watch && request.contains("sendInitialEvents=true"))
        || (!watch && request.contains("/configmaps?"))
}

/// Whether `request` is a watch resumed from a resourceVersion.
fn resumes(request: &str) -> bool {
    request.contains("watch=true")
        && request.contains("resourceVersion=")
        && !request.contains("sendInitialEvents=true")
}

/// Reads `events` until the first list ends, returning the names it listed.
async fn first_list<S>(events: &mut S) -> Vec<String>
where
    S: futures::Stream<Item = Result<Event<ConfigMap>, watch::Error>> + Unpin,
{
    let mut names = Vec::new();
    loop {
        let event = tokio::time::timeout(WAIT, events.next())
            .await
            .expect("the list to end")
            .expect("the stream never ends");
        match event {
            Ok(Event::Init) => names.clear(),
            Ok(Event::InitApply(cm)) => names.push(cm.metadata.name.unwrap()),
            Ok(Event::InitDone) => return names,
            Ok(other) => panic!("{other:?} during the list"),
            // A streaming list refused (1.33 without `WatchList`) is not an error: the
            // engine lists in pages. Anything else is.
            Err(error) => panic!("{error}"),
        }
    }
}

#[tokio::test]
async fn a_list_on_a_plain_client_holds_an_object_written_just_before_it_starts() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("engine-consistent").await.unwrap();
    let gate = WatchGate::default();
    let api: Api<ConfigMap> = Api::namespaced(gate.client(env.config()), ns.name());
    // Written just before the list: a list answered from a watch cache that has not seen it
    // yet (`resourceVersion=0`, "any") could end without it.
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &config_map("just-written", &[]))
        .await
        .unwrap();
    let mut events = pin!(watch::watch(api, watch::Config::default()));
    let listed = first_list(&mut events).await;
    assert_eq!(listed, ["just-written"]);
    let requests = gate.requests();
    let listing: Vec<&String> = requests.iter().filter(|r| lists(r)).collect();
    assert!(!listing.is_empty(), "{requests:?}");
    // Neither a streaming list nor a page asks for a version: the most recent state.
    assert!(
        listing.iter().all(|r| !r.contains("resourceVersion=")),
        "{listing:?}"
    );
    let version = env.version();
    if (version.major, version.minor) >= (1, 34) {
        assert!(
            listing
                .iter()
                .all(|r| r.contains("resourceVersionMatch=NotOlderThan")
                    && r.contains("allowWatchBookmarks=true")),
            "{listing:?}"
        );
    }
}

#[tokio::test]
async fn a_dropped_watch_resumes_from_the_last_version_without_a_list() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("engine-resume").await.unwrap();
    let gate = WatchGate::default();
    let api: Api<ConfigMap> = Api::namespaced(gate.client(env.config()), ns.name());
    // The server ends each watch after 1 s.
    let informer = Informer::builder(api).timeout(1).start();
    informer.wait_for_sync(WAIT).await.unwrap();
    let synced_at = gate.requests().len();
    until("the watch to be dropped and resumed twice", WAIT, || {
        gate.requests()[synced_at..]
            .iter()
            .filter(|r| resumes(r))
            .count()
            >= 2
    })
    .await;
    // The resumed watch delivers what is written now.
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &config_map("after-resume", &[]))
        .await
        .unwrap();
    until("the object written after the resume", WAIT, || {
        informer
            .store()
            .list()
            .iter()
            .any(|cm| cm.metadata.name.as_deref() == Some("after-resume"))
    })
    .await;
    let after = gate.requests()[synced_at..].to_vec();
    assert!(after.iter().all(|r| resumes(r)), "{after:?}");
    assert!(!after.iter().any(|r| lists(r)), "{after:?}");
    assert_eq!(informer.stats().relists, 0);
    assert_eq!(informer.stats().watch_errors, 0);
    informer.stop().await;
}

#[tokio::test]
async fn a_silent_watch_is_dropped_and_resumed_without_a_list() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("engine-silent").await.unwrap();
    let gate = WatchGate::default();
    let api: Api<ConfigMap> = Api::namespaced(gate.client(env.config()), ns.name());
    // Nothing matches, and the server's own timeout is far: after the list, the watch sends
    // nothing for the bound (a bookmark comes about once a minute).
    let config = watch::Config::default()
        .labels("engine=silent")
        .silence_bound(Duration::from_secs(1));
    let mut events = pin!(watch::watch(api, config));
    assert!(first_list(&mut events).await.is_empty());
    let synced_at = gate.requests().len();
    let silent = tokio::time::timeout(WAIT, events.next())
        .await
        .expect("the bound on silence to pass")
        .unwrap();
    assert!(
        matches!(silent, Err(watch::Error::Silent(bound)) if bound == Duration::from_secs(1)),
        "{silent:?}"
    );
    // Resumed: what is written now arrives, without a list.
    ns.api::<ConfigMap>()
        .create(
            &PostParams::default(),
            &config_map("spoken", &[("engine", "silent")]),
        )
        .await
        .unwrap();
    loop {
        let event = tokio::time::timeout(WAIT, events.next())
            .await
            .expect("the object written after the resume")
            .unwrap();
        match event {
            Ok(Event::Apply(cm)) => {
                assert_eq!(cm.metadata.name.as_deref(), Some("spoken"));
                break;
            }
            // Each bound of silence before the write drops the watch once more.
            Err(watch::Error::Silent(_)) => {}
            other => panic!("{other:?}"),
        }
    }
    let after = gate.requests()[synced_at..].to_vec();
    assert!(
        !after.is_empty() && after.iter().all(|r| resumes(r)),
        "{after:?}"
    );
}

#[tokio::test]
async fn paginated_lists_read_the_latest_state_in_pages() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("engine-pages").await.unwrap();
    let writer = ns.api::<ConfigMap>();
    for i in 0..5 {
        writer
            .create(&PostParams::default(), &config_map(&format!("cm-{i}"), &[]))
            .await
            .unwrap();
    }
    let gate = WatchGate::default();
    let api: Api<ConfigMap> = Api::namespaced(gate.client(env.config()), ns.name());
    let mut config = watch::Config::default().strategy(ListStrategy::Paginated);
    config.page_size = 2;
    let mut events = pin!(watch::watch(api, config));
    let mut listed = first_list(&mut events).await;
    listed.sort();
    assert_eq!(listed, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    let requests = gate.requests();
    let pages: Vec<&String> = requests.iter().filter(|r| lists(r)).collect();
    assert_eq!(pages.len(), 3, "{requests:?}");
    assert!(pages.iter().all(|r| r.contains("limit=2")), "{pages:?}");
    assert!(
        pages.iter().all(|r| !r.contains("resourceVersion")),
        "{pages:?}"
    );
    assert!(
        pages[1..].iter().all(|r| r.contains("continue=")),
        "{pages:?}"
    );
}

/// A paginated list whose continue token expires before its next page (etcd compacted past
/// the list's version: `410` on the page) is listed again whole, without pages, as
/// client-go's pager does; not again in pages, which on a busy server could expire again.
#[tokio::test]
async fn an_expired_continue_token_lists_again_whole() {
    let env = TestEnv::builder()
        // Lists from etcd, compacted every second.
        .apiserver_arg("--watch-cache=false")
        .apiserver_arg("--etcd-compaction-interval=1s")
        .start()
        .await
        .unwrap();
    let admin: Api<ConfigMap> = Api::namespaced(env.client().unwrap(), "default");
    let l = [("test", "continue")];
    for name in ["a", "b", "c"] {
        admin
            .create(&PostParams::default(), &config_map(name, &l))
            .await
            .unwrap();
    }
    let gate = WatchGate::default();
    let api: Api<ConfigMap> = Api::namespaced(gate.client(env.config()), "default");
    let mut config = watch::Config::default()
        .labels("test=continue")
        .strategy(ListStrategy::Paginated);
    config.page_size = 1;
    let mut events = pin!(watch::watch(api, config));
    let first = |event: Option<Result<Event<ConfigMap>, watch::Error>>| match event {
        Some(Ok(event)) => event,
        other => panic!("{other:?}"),
    };
    assert!(matches!(first(events.next().await), Event::Init));
    let Event::InitApply(a) = first(events.next().await) else {
        panic!("the first page's object");
    };
    assert_eq!(a.metadata.name.as_deref(), Some("a"));
    // Hold the second page until etcd has compacted past the list's version.
    gate.hold_lists();
    gate.close();
    let mut next = Box::pin(events.next());
    let compacted = async {
        until("the second page to wait at the gate", WAIT, || {
            gate.waiting() == 1
        })
        .await;
        let mut bumps = 0;
        let deadline = tokio::time::Instant::now() + WAIT;
        let version = a.metadata.resource_version.clone().unwrap();
        loop {
            let mut watch = admin
                .watch(&kube::api::WatchParams::default().timeout(1), &version)
                .await
                .unwrap()
                .boxed();
            if matches!(watch.next().await, Some(Ok(kube::core::WatchEvent::Error(ref e))) if e.code == 410)
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "etcd did not compact"
            );
            bumps += 1;
            admin
                .create(
                    &PostParams::default(),
                    &config_map(&format!("bump{bumps}"), &[]),
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        gate.open();
    };
    let (event, ()) = tokio::join!(&mut next, compacted);
    drop(next);
    // The list begins again, whole.
    assert!(
        matches!(first(event), Event::Init),
        "a new list after the 410"
    );
    let mut names = Vec::new();
    loop {
        match first(tokio::time::timeout(WAIT, events.next()).await.unwrap()) {
            Event::InitApply(cm) => names.push(cm.metadata.name.unwrap()),
            Event::InitDone => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(names, ["a", "b", "c"]);
    let requests = gate.requests();
    let pages: Vec<&String> = requests
        .iter()
        .filter(|r| !r.contains("watch=true") && r.contains("/configmaps?"))
        .collect();
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert!(
        pages[0].contains("limit=1") && !pages[0].contains("continue="),
        "{pages:?}"
    );
    assert!(pages[1].contains("continue="), "{pages:?}");
    assert!(
        !pages[2].contains("limit=") && !pages[2].contains("continue="),
        "{pages:?}"
    );
    env.stop().unwrap();
}

/// The bound on silence, set on an informer: an idle watch (nothing to send for a second)
/// is taken for dead and resumed, counted as a watch error, and the informer stays synced.
#[tokio::test]
async fn an_informer_takes_its_silence_bound() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("engine-silence").await.unwrap();
    let gate = WatchGate::default();
    let api: Api<ConfigMap> = Api::namespaced(gate.client(env.config()), ns.name());
    let informer = Informer::builder(api)
        .silence_bound(Duration::from_secs(1))
        .start();
    informer.wait_for_sync(WAIT).await.unwrap();
    until("two silent watches resumed", WAIT, || {
        informer.stats().watch_errors >= 2 && gate.watches() >= 3
    })
    .await;
    assert!(informer.has_synced());
    informer.stop().await;
}
