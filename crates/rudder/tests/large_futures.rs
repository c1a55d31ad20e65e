//! Users' futures of any size on the default 2 MiB stacks of tokio's workers, in the build
//! these tests run in (a debug build): a reconcile, a runnable and a webhook defaulter, each
//! holding 64 KiB across an await, through a controller under the manager, a fleet, and the
//! webhook server. In a debug build every move of a future is a stack slot of the frame that
//! moves it; before the runtime boxed the reconcile future, a 30 KB one overflowed the stack of
//! `tokio-rt-worker` on its first reconcile (the process aborts, so this binary fails).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    // The point of these tests: futures far above the lint's threshold.
    clippy::large_futures
)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt as _;
use kube::api::{Api, PostParams};
use kube::core::admission::AdmissionRequest;
use kube::core::{DynamicObject, ObjectMeta};
use rudder::multicluster::{Fleet, StaticClusters};
use rudder::prelude::*;
use rudder::webhook::admission::{Defaulter, Denial, Warnings};
use rudder::webhook::manifest::ClientConfig;
use rudder_envtest::poll::eventually;
use rudder_envtest::{TestEnv, WebhookOptions};

/// What each future holds across an await.
const BALLAST: usize = 64 * 1024;
const WITHIN: Duration = Duration::from_secs(60);

/// 64 KiB held across an await: every future below awaits this, so holds it.
async fn ballast() -> u8 {
    let ballast = [1u8; BALLAST];
    tokio::task::yield_now().await;
    std::hint::black_box(&ballast)[BALLAST - 1]
}

/// Counts, per cluster, the reconciles that carried their ballast through.
struct Heavy {
    tools: Tools,
    seen: Arc<std::sync::Mutex<BTreeMap<String, usize>>>,
}

impl Reconciler for Heavy {
    type Error = rudder::BoxError;

    async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Self::Error> {
        let one = ballast().await;
        // A read through the cache, as a first reconciler does, with the ballast in the frame.
        let cached = self.tools.get::<ConfigMap>(&request).await?;
        let two = ballast().await;
        if cached.is_some() {
            let cluster = ctx.cluster().unwrap_or("home").to_owned();
            *self.seen.lock().unwrap().entry(cluster).or_default() += usize::from(one + two);
        }
        Ok(Action::done())
    }
}

/// Labels every ConfigMap `heavy=yes`, after awaiting its ballast.
struct HeavyDefaulter;

impl Defaulter<ConfigMap> for HeavyDefaulter {
    async fn default(
        &self,
        cm: &mut ConfigMap,
        _: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        let one = ballast().await;
        cm.labels_mut()
            .insert("heavy".into(), if one == 1 { "yes" } else { "no" }.into());
        Ok(Vec::new())
    }
}

fn declare_webhook(manager: &Manager) {
    rudder::new_webhook(manager)
        .for_::<ConfigMap>()
        .defaulter(HeavyDefaulter)
        .complete()
        .unwrap();
}

#[test]
fn the_ballast_makes_each_future_at_least_64_kib() {
    assert!(size_of_val(&ballast()) >= BALLAST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn futures_of_64_kib_run_through_a_controller_a_manager_a_fleet_and_a_webhook() {
    let env = TestEnv::start().await.unwrap();
    let client = env.client().unwrap();
    let ns = "heavy";
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.into()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await
        .unwrap();
    // The webhook configuration the facade renders, installed to call this process.
    let scratch = Manager::builder(client.clone())
        .health_probe_address(None)
        .metrics_address(None)
        .build()
        .unwrap();
    declare_webhook(&scratch);
    let manifests = rudder::webhook_manifests(
        &scratch,
        "heavy",
        &ClientConfig::service("unused", "unused"),
        &mut Vec::new(),
    );
    let installed = env
        .install_webhooks(WebhookOptions {
            mutating: manifests.mutating.into_iter().collect(),
            validating: Vec::new(),
            conversion_crds: Vec::new(),
        })
        .await
        .unwrap();

    let manager = Arc::new(
        Manager::builder(client.clone())
            .health_probe_address(None)
            .metrics_address(None)
            .cache(move |c| c.default_namespace(ns))
            .webhook_options(
                rudder::webhook::Options::new()
                    .bind_address(installed.addr())
                    .cert_dir(installed.cert_dir()),
            )
            .build()
            .unwrap(),
    );
    declare_webhook(&manager);
    let seen: Arc<std::sync::Mutex<BTreeMap<String, usize>>> = Arc::default();
    // A controller of the home cluster, under the manager.
    rudder::new_controller(&manager)
        .for_::<ConfigMap>()
        .named("heavy-home")
        .complete_with({
            let seen = Arc::clone(&seen);
            move |tools| Heavy { tools, seen }
        })
        .await
        .unwrap();
    // The same reconciler in a fleet of one member (this control plane again).
    let fleet = Fleet::builder(&manager)
        .provider(StaticClusters::new().with("member", env.config().clone()))
        .cache(move |cache| cache.default_namespace(ns))
        .build()
        .unwrap();
    fleet
        .new_controller()
        .for_::<ConfigMap>()
        .named("heavy-fleet")
        .complete_with({
            let seen = Arc::clone(&seen);
            move |tools| Heavy {
                tools,
                seen: Arc::clone(&seen),
            }
        })
        .unwrap();
    // A runnable whose future holds its ballast for as long as it runs.
    let ran = Arc::new(AtomicUsize::new(0));
    manager.add(rudder::runnable("heavy-runnable", false, {
        let ran = Arc::clone(&ran);
        move |shutdown| async move {
            let held = [1u8; BALLAST];
            ran.fetch_add(usize::from(ballast().await), Ordering::SeqCst);
            shutdown.stopped().await;
            ran.fetch_add(
                usize::from(std::hint::black_box(&held)[0]),
                Ordering::SeqCst,
            );
            Ok(())
        }
    }));
    let running = support::start(&manager);

    // Created through the webhook (defaulted by the heavy defaulter), then reconciled by both.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let created = eventually(
        "the ConfigMap created through the webhook",
        WITHIN,
        async || {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some("cargo".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            };
            // Refused until the webhook server listens (failurePolicy Fail).
            api.create(&PostParams::default(), &cm).await.ok()
        },
    )
    .await;
    assert_eq!(
        created.labels().get("heavy").map(String::as_str),
        Some("yes")
    );
    eventually(
        "a reconcile in the home cluster and in the member",
        WITHIN,
        async || {
            let seen = seen.lock().unwrap();
            (seen.get("home").is_some_and(|n| *n >= 2)
                && seen.get("member").is_some_and(|n| *n >= 2))
            .then_some(())
        },
    )
    .await;
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    running.0.cancel();
    running.1.await.unwrap().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 2, "the runnable ran to its end");
}
