//! A controller's own path, in memory: a first pass over N objects from a channel source
//! (handler, queue, causes, worker, a no-op reconciler), no API server, on one thread, so
//! that callgrind counts the controller's instructions alone.
//!
//! `cargo bench -p rudder-controller --bench first_pass -- --bench [N]` prints the wall time;
//! for instructions, build it (`cargo bench --no-run`) and run the binary it names under
//! `valgrind --tool=callgrind BINARY --bench 20000`; add `--objects` for a watch of objects
//! (the causes then also name each event's object, as a builder's `for` and `owns` do).
//! Without `--bench` in its arguments (as under `cargo test --benches`) it returns at once.
//!
//! `--api`: the first pass of a real controller instead, from a real API server (rudder-envtest,
//! N ConfigMaps created first): a cache's informer lists them, decodes and stores them, and the
//! controller reconciles each once. Under callgrind, count only that pass with
//! `--toggle-collect='first_pass::measured'` (the setup is in other functions; the API server
//! is another process, which callgrind does not follow).

#![allow(
    clippy::disallowed_methods,
    reason = "benches may spawn: the bench owns its tasks"
)]
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::ObjectMeta;
use rudder_controller::{Controller, WatchSpec};
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Event;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_handler::{EnqueueObject, channel};
use tokio_util::sync::CancellationToken;

/// Counts reconciles; wakes the bench at the last.
struct Count {
    done: Arc<AtomicUsize>,
    all: Arc<tokio::sync::Notify>,
    of: usize,
}

impl Reconciler for Count {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        if self.done.fetch_add(1, Ordering::Relaxed) + 1 == self.of {
            self.all.notify_one();
        }
        Ok(Action::done())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(at) = args.iter().position(|a| a == "--bench") else {
        return;
    };
    let n: usize = args
        .get(at + 1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    // `--objects`: the watch's causes name the object of each event (a watch of objects).
    let objects_named = args.iter().any(|a| a == "--objects");
    if args.iter().any(|a| a == "--api") {
        api_first_pass(n, objects_named);
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let all = Arc::new(tokio::sync::Notify::new());
        let reconciler = Count {
            done: Arc::new(AtomicUsize::new(0)),
            all: Arc::clone(&all),
            of: n,
        };
        let c = Controller::builder("first-pass", reconciler)
            .build()
            .unwrap();
        let (events, source) = channel::<ConfigMap>(1024);
        if objects_named {
            // As a builder's `for` and `owns` watch: the causes also name each object.
            c.add_watch(WatchSpec::objects(source, EnqueueObject, vec![]).labelled("for"))
                .unwrap();
        } else {
            c.watch(source, EnqueueObject, vec![]).unwrap();
        }
        let stop = CancellationToken::new();
        let run = tokio::spawn({
            let (c, stop) = (c.clone(), stop.clone());
            async move { c.run(stop).await }
        });
        let objects: Vec<Arc<ConfigMap>> = (0..n)
            .map(|i| {
                Arc::new(ConfigMap {
                    metadata: ObjectMeta {
                        namespace: Some("ns".into()),
                        name: Some(format!("cm-{i}")),
                        resource_version: Some(i.to_string()),
                        ..ObjectMeta::default()
                    },
                    ..ConfigMap::default()
                })
            })
            .collect();
        let started = std::time::Instant::now();
        let finished = all.notified();
        for object in objects {
            events
                .send(Event::Create {
                    object,
                    initial_list: true,
                })
                .await
                .unwrap();
        }
        finished.await;
        eprintln!("{n} objects reconciled once in {:?}", started.elapsed());
        stop.cancel();
        run.await.unwrap().unwrap();
    });
}

/// `--api`: N ConfigMaps created in a real API server, then [`measured`].
fn api_first_pass(n: usize, objects_named: bool) {
    use futures::StreamExt;
    use kube::api::{Api, PostParams};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (env, client) = runtime.block_on(async {
        let env = rudder_envtest::TestEnv::builder().start().await.unwrap();
        let client = env.client().unwrap();
        let namespace = k8s_openapi::api::core::v1::Namespace {
            metadata: ObjectMeta {
                name: Some("first-pass".into()),
                ..ObjectMeta::default()
            },
            ..Default::default()
        };
        Api::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "first-pass");
        futures::stream::iter(0..n)
            .map(|i| {
                let api = api.clone();
                async move {
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(format!("cm-{i}")),
                            ..ObjectMeta::default()
                        },
                        data: Some([("value".to_owned(), "x".repeat(400))].into()),
                        ..ConfigMap::default()
                    };
                    api.create(&PostParams::default(), &cm).await.unwrap();
                }
            })
            .buffer_unordered(32)
            .collect::<()>()
            .await;
        (env, client)
    });
    let took = measured(&runtime, client, n, objects_named);
    eprintln!("{n} objects listed and reconciled once from the API server in {took:?}");
    runtime.block_on(async move { drop(env) });
}

/// The first pass alone: a cache and a controller started, every object reconciled once,
/// both stopped.
#[inline(never)]
fn measured(
    runtime: &tokio::runtime::Runtime,
    client: kube::Client,
    n: usize,
    objects_named: bool,
) -> std::time::Duration {
    runtime.block_on(async move {
        let started = std::time::Instant::now();
        let all = Arc::new(tokio::sync::Notify::new());
        let finished = all.notified();
        let reconciler = Count {
            done: Arc::new(AtomicUsize::new(0)),
            all: Arc::clone(&all),
            of: n,
        };
        let stop = CancellationToken::new();
        let cache = rudder_cache::Cache::builder(client)
            .default_namespace("first-pass")
            .build(&stop);
        let c = Controller::builder("first-pass", reconciler)
            .build()
            .unwrap();
        let source = rudder_handler::Kind::<ConfigMap>::from_cache(&cache);
        if objects_named {
            c.add_watch(WatchSpec::objects(source, EnqueueObject, vec![]).labelled("for"))
                .unwrap();
        } else {
            c.watch(source, EnqueueObject, vec![]).unwrap();
        }
        let run = tokio::spawn({
            let (c, stop) = (c.clone(), stop.clone());
            async move { c.run(stop).await }
        });
        finished.await;
        let took = started.elapsed();
        stop.cancel();
        run.await.unwrap().unwrap();
        cache.stop().await;
        took
    })
}
