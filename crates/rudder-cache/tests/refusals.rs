//! An informer the API server refuses (RBAC without list and watch): whoever waits for its
//! sync gets the refusal at once instead of a timeout, it is logged once for the whole
//! streak (and not by kube-runtime's watcher too), counted, retried in the background, and
//! the informer syncs once the RBAC is granted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};
use rudder_cache::{Cache, Error, ListOptions, Scope, SyncError};
use rudder_envtest::TestEnv;
use rudder_envtest::least_privilege::LogCapture;
use rudder_envtest::poll::Poll;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Everything logged (INFO and up), from before the first informer starts.
static LOG: LazyLock<&LogCapture> = LazyLock::new(LogCapture::global);

/// How long a waiter may take to hear of a refusal: one list's round trip, with room.
const AT_ONCE: Duration = Duration::from_secs(5);

/// The lines of the log that contain `needle`.
fn lines_with(needle: &str) -> Vec<String> {
    LOG.lines_containing(needle)
}

#[tokio::test]
async fn a_refused_informer_fails_its_waiters_at_once_logs_once_and_syncs_once_allowed() {
    LazyLock::force(&LOG);
    #[cfg(feature = "metrics")]
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    #[cfg(feature = "metrics")]
    let handle = recorder.handle();
    // The test runtime has one thread, so the informer's task reports to this recorder.
    #[cfg(feature = "metrics")]
    let _guard = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("refusals").await.unwrap();
    let user = ns.service_account("reader").await.unwrap();
    let token = CancellationToken::new();
    // The default sync timeout is a minute: a refusal must not wait for it.
    let cache = Cache::builder(user.client())
        .default_namespace(ns.name())
        .build(&token);

    let started = Instant::now();
    let read = cache.list::<ConfigMap>(&ListOptions::default()).await;
    let Err(Error::Sync(SyncError::Refused { refusal, .. })) = read else {
        panic!("a read refused by RBAC: {read:?}");
    };
    assert!(started.elapsed() < AT_ONCE, "{:?}", started.elapsed());
    assert_eq!(refusal.code, 403);
    assert!(refusal.message.contains("forbidden"), "{refusal}");

    // The read started (and pinned) the informer, which retries with backoff.
    let informer = cache
        .informer::<ConfigMap>(&Scope::namespace(ns.name()))
        .unwrap();
    Poll::new("three refusals", Duration::from_secs(30))
        .until(|| informer.stats().refusals >= 3)
        .await;
    assert!(informer.refusal().is_some());
    // Each later wait hears of it at once too: a read, the cache's sync.
    let started = Instant::now();
    assert!(matches!(
        cache.get::<ConfigMap>(Some(ns.name()), "any").await,
        Err(Error::Sync(SyncError::Refused { .. }))
    ));
    assert!(matches!(
        cache.wait_for_sync(Duration::from_secs(60)).await,
        Err(SyncError::Refused { .. })
    ));
    assert!(started.elapsed() < AT_ONCE, "{:?}", started.elapsed());

    // Logged once for the streak, by the informer alone: no 403 dump from kube-runtime's
    // watcher for each retry.
    let refused = lines_with("refuses to list or watch");
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert!(refused[0].contains("forbidden"), "{refused:#?}");
    let dumps = lines_with("kube_runtime");
    assert!(dumps.is_empty(), "{dumps:#?}");
    #[cfg(feature = "metrics")]
    {
        let page = handle.render();
        let refusals: f64 =
            rudder_envtest::metrics::samples(&page, "rudder_cache_watch_refusals_total")
                .into_iter()
                .filter(|(labels, _)| rudder_envtest::metrics::has_label(labels, "code", "403"))
                .map(|(_, value)| value)
                .sum();
        assert!(refusals >= 3.0, "{page}");
    }

    // Granted: the informer syncs on its next retry, and says so once.
    grant_config_maps(&ns, user.name()).await;
    ns.wait_for_access(&user, "watch", "", "configmaps", true)
        .await
        .unwrap();
    informer.wait_until_allowed().await;
    informer
        .wait_for_sync(Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        cache
            .list::<ConfigMap>(&ListOptions::default())
            .await
            .is_ok()
    );
    assert_eq!(lines_with("allows listing and watching").len(), 1);
    assert_eq!(lines_with("refuses to list or watch").len(), 1);
    cache.stop().await;
}

/// A Role granting `list` and `watch` on ConfigMaps in `ns`, bound to the ServiceAccount
/// `user`.
async fn grant_config_maps(ns: &rudder_envtest::TestNamespace, user: &str) {
    let meta = ObjectMeta {
        name: Some("config-maps".to_owned()),
        ..ObjectMeta::default()
    };
    let role = Role {
        metadata: meta.clone(),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".to_owned()]),
            verbs: vec!["list".to_owned(), "watch".to_owned()],
            ..PolicyRule::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: meta,
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "Role".to_owned(),
            name: "config-maps".to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: user.to_owned(),
            namespace: Some(ns.name().to_owned()),
            ..Subject::default()
        }]),
    };
    let roles: Api<Role> = ns.api();
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<RoleBinding> = ns.api();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}
