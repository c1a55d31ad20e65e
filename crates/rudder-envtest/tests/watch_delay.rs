//! [`WatchDelay`] against the real API server: a watch through it sees each write its delay
//! late, a stall holds events until resumed, and everything else (reads, errors) passes at
//! once.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use rudder_envtest::poll::until;
use rudder_envtest::{TestEnv, WatchDelay};
use tokio::time::Instant;

/// The delay the tests ask for: well above loopback's milliseconds, well below a test's
/// patience.
const DELAY: Duration = Duration::from_millis(300);

/// How much sooner than the create's answer the API server may push its event to watchers.
const EARLY_EVENT: Duration = Duration::from_millis(50);

/// How long past its release a line may take to reach the watcher on a busy machine.
const SLACK: Duration = Duration::from_secs(2);

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("step".into(), "0".into())])),
        ..ConfigMap::default()
    }
}

/// A watch of `api`'s ConfigMaps after `resource_version`, without bookmarks (so every line
/// is an event of a test's own writes).
async fn watch(
    api: &Api<ConfigMap>,
    resource_version: &str,
) -> impl Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + use<> {
    api.watch(
        &WatchParams::default().disable_bookmarks(),
        resource_version,
    )
    .await
    .unwrap()
    .boxed()
}

/// When the watch of `api` after `resource_version` first sees `name` added.
fn first_sighting(
    api: Api<ConfigMap>,
    resource_version: String,
    name: &'static str,
) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        let mut events = watch(&api, &resource_version).await;
        while let Some(event) = events.try_next().await.unwrap() {
            if let WatchEvent::Added(cm) = event
                && cm.metadata.name.as_deref() == Some(name)
            {
                return Instant::now();
            }
        }
        panic!("the watch ended before {name} was added");
    })
}

/// The `step` of the next event on `events`, which must come within `within`.
async fn next_step(
    events: &mut (impl Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin),
    within: Duration,
) -> String {
    let event = tokio::time::timeout(within, events.try_next())
        .await
        .expect("no event in time")
        .unwrap()
        .expect("the watch ended");
    let WatchEvent::Modified(cm) = event else {
        panic!("expected a modification, got {event:?}");
    };
    cm.data
        .unwrap_or_default()
        .remove("step")
        .unwrap_or_default()
}

#[tokio::test]
async fn a_create_reaches_a_watch_through_the_proxy_its_delay_late_and_a_get_at_once() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("watch_delay_create").await.unwrap();
    let proxy = WatchDelay::start(env, DELAY).unwrap();
    let direct = ns.api::<ConfigMap>();
    let slowed: Api<ConfigMap> = Api::namespaced(proxy.client(), ns.name());

    // Both watches from the same point, the proxy's open before the write.
    let listed = slowed.list_metadata(&ListParams::default()).await.unwrap();
    let version = listed.metadata.resource_version.unwrap();
    let seen_directly = first_sighting(direct.clone(), version.clone(), "settings");
    let seen_slowed = first_sighting(slowed.clone(), version, "settings");
    until(
        "the watch through the proxy open",
        Duration::from_secs(10),
        || proxy.open_watches() == 1,
    )
    .await;

    let sent = Instant::now();
    direct
        .create(&PostParams::default(), &config_map("settings"))
        .await
        .unwrap();
    let returned = Instant::now();
    let slowed_at = tokio::time::timeout(DELAY + SLACK, seen_slowed)
        .await
        .expect("the create did not reach the watch through the proxy in time")
        .unwrap();
    let directly_at = tokio::time::timeout(SLACK, seen_directly)
        .await
        .expect("the create did not reach the direct watch")
        .unwrap();
    // The event cannot reach the proxy before the create was sent, so this bound is exact.
    let after_sent = slowed_at.saturating_duration_since(sent);
    assert!(
        after_sent >= DELAY,
        "seen {after_sent:?} after the create was sent"
    );
    // The API server may push the event a millisecond or two before the create's answer
    // reaches the client (seen here: the direct watch had it 1.6 ms before), so the bound from
    // the answer allows for that much.
    let after_write = slowed_at.saturating_duration_since(returned);
    assert!(
        after_write + EARLY_EVENT >= DELAY,
        "seen {after_write:?} after the create returned, sooner than the delay {DELAY:?}"
    );
    assert!(
        after_write <= DELAY + SLACK,
        "seen {after_write:?} after the create"
    );
    let added = slowed_at.saturating_duration_since(directly_at);
    assert!(
        added + EARLY_EVENT >= DELAY,
        "seen {added:?} after the direct watch"
    );
    assert_eq!(proxy.lines_forwarded(), 1);

    // A read is not delayed. The first one opens a connection to the proxy beside the
    // watch's, and the proxy one to the API server; the second is timed.
    slowed.get("settings").await.unwrap();
    let asked = Instant::now();
    let read = slowed.get("settings").await.unwrap();
    let get_took = asked.elapsed();
    assert_eq!(read.metadata.name.as_deref(), Some("settings"));
    assert!(
        get_took < DELAY / 2,
        "a GET through the proxy took {get_took:?}"
    );
    eprintln!(
        "delay {DELAY:?}: seen {after_write:?} after the create returned, {added:?} after the \
         direct watch; a GET took {get_took:?}"
    );
}

#[tokio::test]
async fn a_stall_holds_the_events_of_updates_until_resumed_then_they_come_in_order() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("watch_delay_stall").await.unwrap();
    let proxy = WatchDelay::start(env, Duration::from_millis(50)).unwrap();
    let direct = ns.api::<ConfigMap>();
    let slowed: Api<ConfigMap> = Api::namespaced(proxy.client(), ns.name());
    let created = direct
        .create(&PostParams::default(), &config_map("stalled"))
        .await
        .unwrap();
    let mut events = watch(&slowed, &created.metadata.resource_version.unwrap()).await;

    proxy.stall();
    for step in ["1", "2"] {
        let patch = serde_json::json!({ "data": { "step": step } });
        direct
            .patch("stalled", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    // Both events reached the proxy, so what follows shows them held, not merely slow.
    until("both updates' events held", Duration::from_secs(10), || {
        proxy.lines_held() == 2
    })
    .await;
    let nothing = tokio::time::timeout(Duration::from_secs(1), events.try_next()).await;
    assert!(nothing.is_err(), "an event came while stalled: {nothing:?}");
    assert_eq!((proxy.lines_held(), proxy.lines_forwarded()), (2, 0));

    let resumed = Instant::now();
    proxy.resume();
    assert_eq!(next_step(&mut events, SLACK).await, "1");
    assert_eq!(next_step(&mut events, SLACK).await, "2");
    eprintln!(
        "after resume, both held events came in {:?}",
        resumed.elapsed()
    );
    assert_eq!((proxy.lines_held(), proxy.lines_forwarded()), (0, 2));
}

#[tokio::test]
async fn an_error_passes_through_with_its_status() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("watch_delay_error").await.unwrap();
    let proxy = WatchDelay::start(env, DELAY).unwrap();
    let slowed: Api<ConfigMap> = Api::namespaced(proxy.client(), ns.name());
    let error = slowed.get("missing").await.unwrap_err();
    let kube::Error::Api(status) = &error else {
        panic!("expected an API error, got {error:?}");
    };
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert!(status.message.contains("missing"), "{status:?}");
}

#[tokio::test]
async fn a_watcher_that_hangs_up_and_a_dropped_proxy_end_the_forwarding() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("watch_delay_hang_up").await.unwrap();
    let proxy = WatchDelay::start(env, DELAY).unwrap();
    let slowed: Api<ConfigMap> = Api::namespaced(proxy.client(), ns.name());

    let events = watch(&slowed, "0").await;
    until("the watch open", Duration::from_secs(10), || {
        proxy.open_watches() == 1
    })
    .await;
    drop(events);
    until("the hung-up watch ended", Duration::from_secs(10), || {
        proxy.open_watches() == 0
    })
    .await;

    // A watch still open when the proxy goes ends, and nothing listens any more.
    let mut events = watch(&slowed, "0").await;
    let addr = proxy.addr();
    drop(proxy);
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(_)) = events.next().await {}
    })
    .await;
    assert!(end.is_ok(), "the watch went on after the proxy was dropped");
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "the proxy still listens on {addr}"
        );
        tokio::time::sleep(rudder_envtest::poll::POLL_INTERVAL).await;
    }
}
