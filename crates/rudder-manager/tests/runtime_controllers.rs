//! Controllers added to and removed from a running manager, and the informers that come and
//! go with them.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use kube::core::ObjectMeta;
use rudder_cache::Scope;
use rudder_controller::Controller;
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_core::runnable;
use rudder_envtest::TestEnv;
use rudder_envtest::poll::eventually;
use rudder_handler::{EnqueueObject, Kind};
use rudder_manager::Manager;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

struct Recorder(mpsc::UnboundedSender<Request>);

impl Reconciler for Recorder {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let _ = self.0.send(request);
        Ok(Action::done())
    }
}

/// A controller called `name` of `K` from `manager`'s cache; its reconciles arrive on the
/// receiver.
fn controller<K: rudder_cache::Typed>(
    manager: &Manager,
    name: &str,
) -> (Controller<Recorder>, mpsc::UnboundedReceiver<Request>) {
    let (tx, seen) = mpsc::unbounded_channel();
    let controller = Controller::builder(name, Recorder(tx)).build().unwrap();
    controller
        .watch(
            Kind::<K>::from_cache(manager.cache()),
            EnqueueObject,
            vec![],
        )
        .unwrap();
    (controller, seen)
}

/// Waits until `seen` has a reconcile of `name`.
async fn reconciled(seen: &mut mpsc::UnboundedReceiver<Request>, name: &str) {
    tokio::time::timeout(WAIT, async {
        while let Some(request) = seen.recv().await {
            if request.name() == name {
                return;
            }
        }
        panic!("the controller stopped before reconciling {name}");
    })
    .await
    .unwrap_or_else(|_| panic!("no reconcile of {name} within {WAIT:?}"));
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

#[tokio::test]
async fn controllers_come_and_go_with_their_informers_while_the_manager_runs() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("runtime-controllers").await.unwrap();
    let namespace = ns.name().to_owned();
    let health: Option<SocketAddr> = Some(([127, 0, 0, 1], 0).into());
    let manager = Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(health)
            .metrics_address(None)
            .cache(move |c| c.default_namespace(namespace))
            .build()
            .unwrap(),
    );
    let (configmaps, mut configmaps_seen) = controller::<ConfigMap>(&manager, "runtime-configmaps");
    manager.add_controller(configmaps);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (manager, stop) = (Arc::clone(&manager), stop.clone());
        async move { manager.start(stop).await }
    });
    let cms: Api<ConfigMap> = ns.api();
    let secrets: Api<Secret> = ns.api();
    let scope = Scope::namespace(ns.name());
    cms.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: meta("first"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    reconciled(&mut configmaps_seen, "first").await;
    assert_eq!(manager.cache().informer_count(), 1);

    // Added while running: starts at once, with an informer of its own type.
    let (secrets_controller, mut secrets_seen) = controller::<Secret>(&manager, "runtime-secrets");
    let probe = secrets_controller.clone();
    manager.add_controller(secrets_controller);
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: meta("s1"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    reconciled(&mut secrets_seen, "s1").await;
    assert!(probe.has_synced());
    assert_eq!(manager.cache().informer_users::<Secret>(&scope), 1);
    assert_eq!(manager.cache().informer_count(), 2);
    let health = manager.health_address().unwrap();
    eventually("ready with both controllers", WAIT, async || {
        let answer = rudder_envtest::http::get(health, "/readyz").await.ok()?;
        (answer.status == 200).then_some(())
    })
    .await;

    // A second manager-side user of the ConfigMap informer: removing it keeps the informer.
    let (also, mut also_seen) = controller::<ConfigMap>(&manager, "runtime-configmaps-also");
    manager.add_controller(also);
    reconciled(&mut also_seen, "first").await;
    assert_eq!(manager.cache().informer_users::<ConfigMap>(&scope), 2);
    assert!(manager.remove_controller("runtime-configmaps-also").await);
    assert_eq!(manager.cache().informer_users::<ConfigMap>(&scope), 1);
    assert!(
        !manager.remove_controller("runtime-configmaps-also").await,
        "already gone"
    );
    drop(probe);

    // Removing the only user of the Secret informer stops it.
    assert!(manager.remove_controller("runtime-secrets").await);
    assert_eq!(manager.cache().informer_users::<Secret>(&scope), 0);
    assert_eq!(
        manager.cache().informer_count(),
        1,
        "only the ConfigMap informer is left"
    );
    // The other controller goes on.
    cms.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: meta("second"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    reconciled(&mut configmaps_seen, "second").await;
    // The removed one no longer reconciles: its channel's sender went with it.
    assert!(
        tokio::time::timeout(WAIT, async { while secrets_seen.recv().await.is_some() {} })
            .await
            .is_ok(),
        "the removed controller's reconciler was dropped"
    );

    // A plain runnable added while running runs too, and can be removed.
    let (ran, mut ran_seen) = mpsc::unbounded_channel();
    manager.add(runnable(
        "late-runnable",
        false,
        move |shutdown| async move {
            let _ = ran.send(());
            shutdown.stopped().await;
            Ok(())
        },
    ));
    tokio::time::timeout(WAIT, ran_seen.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(manager.remove("late-runnable").await);

    stop.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_removed_controller_frees_an_informer_nothing_pinned() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("runtime-release").await.unwrap();
    let namespace = ns.name().to_owned();
    let manager = Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(None)
            .metrics_address(None)
            .cache(move |c| c.default_namespace(namespace))
            .build()
            .unwrap(),
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (manager, stop) = (Arc::clone(&manager), stop.clone());
        async move { manager.start(stop).await }
    });
    let scope = Scope::namespace(ns.name());
    let (secrets_controller, mut seen) = controller::<Secret>(&manager, "runtime-release-secrets");
    manager.add_controller(secrets_controller);
    let secrets: Api<Secret> = ns.api();
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: meta("s"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    reconciled(&mut seen, "s").await;
    assert_eq!(manager.cache().informer_count(), 1);

    assert!(manager.remove_controller("runtime-release-secrets").await);
    // Released when the controller's sources ended, before `remove_controller` returned.
    assert_eq!(manager.cache().informer_users::<Secret>(&scope), 0);
    assert_eq!(manager.cache().informer_count(), 0, "stopped and forgotten");

    // Added again under the same name once the old one is gone: a new informer.
    drop(seen);
    let (again, mut seen) = controller::<Secret>(&manager, "runtime-release-secrets");
    manager.add_controller(again);
    reconciled(&mut seen, "s").await;
    assert_eq!(manager.cache().informer_count(), 1);

    stop.cancel();
    running.await.unwrap().unwrap();
}
