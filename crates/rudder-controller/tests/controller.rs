//! The controller's rules: backoff, terminal errors, panics, timeouts, stop, concurrency.
//!
//! These use channel sources, which need no API server; the informer-backed sources are
//! tested with rudder-cache against rudder-envtest.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::ObjectMeta;
use metrics_exporter_prometheus::PrometheusBuilder;
use rudder_controller::{BuildError, Controller, RunError};
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Event;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_core::Source;
use rudder_core::SourceError;
use rudder_core::Started;
use rudder_core::Synced;
use rudder_core::TerminalError;
use rudder_envtest::poll::Poll;
use rudder_handler::{EnqueueObject, EventSender, channel};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

fn cm(name: &str, version: &str) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    })
}

async fn send(events: &EventSender<ConfigMap>, name: &str) {
    events
        .send(Event::Generic {
            object: cm(name, "1"),
        })
        .await
        .unwrap();
}

/// A reconciler driven by a closure, recording when each call started.
struct Scripted<F> {
    calls: Mutex<Vec<(Request, Instant)>>,
    script: F,
}

#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("transient")]
    Transient,
    #[error("broken beyond repair")]
    Fatal(#[source] TerminalError),
}

impl<F, Fut> Reconciler for Scripted<F>
where
    F: Fn(usize, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Failure>> + Send,
{
    type Error = Failure;

    async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Failure> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push((request, Instant::now()));
            calls.len()
        };
        (self.script)(n, ctx).await
    }
}

fn scripted<F, Fut>(script: F) -> Scripted<F>
where
    F: Fn(usize, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Failure>> + Send,
{
    Scripted {
        calls: Mutex::new(Vec::new()),
        script,
    }
}

fn calls<F>(c: &Controller<Scripted<F>>) -> Vec<Instant>
where
    Scripted<F>: Reconciler,
{
    c.reconciler()
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(_, at)| *at)
        .collect()
}

/// Starts `controller` with one channel source; returns the sender, the stop token and the
/// running task.
fn start<R: Reconciler>(
    controller: &Controller<R>,
) -> (
    EventSender<ConfigMap>,
    CancellationToken,
    tokio::task::JoinHandle<rudder_controller::Result<()>>,
) {
    let (events, source) = channel::<ConfigMap>(64);
    controller.watch(source, EnqueueObject, vec![]).unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await }
    });
    (events, stop, task)
}

/// Polls `cond` every millisecond (of paused time) until it holds, for at most `limit`.
async fn eventually(what: &str, limit: Duration, cond: impl FnMut() -> bool) {
    Poll::new(what, limit)
        .every(Duration::from_millis(1))
        .until(cond)
        .await;
}

#[tokio::test(start_paused = true)]
async fn errors_back_off_exponentially_and_success_forgets() {
    let c = Controller::builder(
        "backoff",
        scripted(|n, _| async move {
            if n <= 4 {
                Err(Failure::Transient)
            } else {
                Ok(Action::done())
            }
        }),
    )
    .build()
    .unwrap();
    let (events, stop, task) = start(&c);
    send(&events, "a").await;
    eventually("5 calls", Duration::from_secs(5), || calls(&c).len() == 5).await;
    let at = calls(&c);
    let gaps: Vec<_> = at.windows(2).map(|w| w[1] - w[0]).collect();
    let ms = Duration::from_millis;
    assert_eq!(gaps, [ms(5), ms(10), ms(20), ms(40)]);
    assert_eq!(
        c.queue().num_requeues(&Request::namespaced("ns", "a")),
        0,
        "forgotten"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(calls(&c).len(), 5, "no reconcile without a change");
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_terminal_error_is_not_retried_but_counted() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let c = Controller::builder(
        "terminal",
        scripted(|_, _| async {
            Err(Failure::Fatal(TerminalError::new(
                "spec.replicas is negative",
            )))
        }),
    )
    .build()
    .unwrap();
    let (events, stop, task) = start(&c);
    send(&events, "a").await;
    eventually("1 call", Duration::from_secs(1), || calls(&c).len() == 1).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(calls(&c).len(), 1);
    let text = handle.render();
    for line in [
        r#"controller_runtime_terminal_reconcile_errors_total{controller="terminal"} 1"#,
        r#"controller_runtime_reconcile_errors_total{controller="terminal"} 1"#,
        r#"controller_runtime_reconcile_total{controller="terminal",result="error"} 1"#,
        r#"controller_runtime_reconcile_total{controller="terminal",result="success"} 0"#,
        r#"controller_runtime_max_concurrent_reconciles{controller="terminal"} 1"#,
        r#"controller_runtime_reconcile_time_seconds_count{controller="terminal"} 1"#,
    ] {
        assert!(text.contains(line), "missing {line} in:\n{text}");
    }
    assert!(text.contains(r#"workqueue_adds_total{name="terminal",controller="terminal"}"#));
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A controller declared before the process has a recorder still reports to the one it has
/// when the controller starts: its handles, and its queue's, are made at start.
#[tokio::test(start_paused = true)]
async fn a_controller_built_before_its_recorder_reports_to_it() {
    let c = Controller::builder("early", scripted(|_, _| async { Ok(Action::done()) }))
        .build()
        .unwrap();
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let (events, stop, task) = start(&c);
    send(&events, "a").await;
    eventually("1 call", Duration::from_secs(1), || calls(&c).len() == 1).await;
    let text = handle.render();
    for line in [
        r#"controller_runtime_reconcile_total{controller="early",result="success"} 1"#,
        r#"controller_runtime_max_concurrent_reconciles{controller="early"} 1"#,
        r#"workqueue_adds_total{name="early",controller="early"} 1"#,
        "# HELP controller_runtime_reconcile_total ",
        "# HELP workqueue_adds_total ",
    ] {
        assert!(text.contains(line), "missing {line} in:\n{text}");
    }
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_panic_is_caught_counted_and_retried() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let c = Controller::builder(
        "panicky",
        scripted(|n, _| async move {
            assert!(n > 1, "first reconcile blows up");
            Ok(Action::done())
        }),
    )
    .build()
    .unwrap();
    let (events, stop, task) = start(&c);
    send(&events, "a").await;
    eventually("2 calls", Duration::from_secs(1), || calls(&c).len() == 2).await;
    let text = handle.render();
    assert!(text.contains(r#"controller_runtime_reconcile_panics_total{controller="panicky"} 1"#));
    // The worker survived: it still reconciles new requests.
    send(&events, "b").await;
    eventually("3 calls", Duration::from_secs(1), || calls(&c).len() == 3).await;
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn requeue_after_and_priority() {
    let c = Controller::builder(
        "requeue-after",
        scripted(|n, _| async move {
            Ok(if n == 1 {
                Action::requeue_after(Duration::from_secs(30)).with_priority(5)
            } else {
                Action::done()
            })
        }),
    )
    .build()
    .unwrap();
    let (events, stop, task) = start(&c);
    send(&events, "a").await;
    eventually("2 calls", Duration::from_secs(60), || calls(&c).len() == 2).await;
    let at = calls(&c);
    assert_eq!(at[1] - at[0], Duration::from_secs(30));
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_timeout_cancels_the_context() {
    let c = Controller::builder(
        "timeout",
        scripted(|_, ctx| async move {
            ctx.cancelled().await;
            Ok(Action::done())
        }),
    )
    .options(rudder_controller::Options::new().reconcile_timeout(Duration::from_secs(2)))
    .build()
    .unwrap();
    let (events, stop, task) = start(&c);
    let begun = Instant::now();
    send(&events, "a").await;
    eventually("one call, finished", Duration::from_secs(5), || {
        c.queue().stats().processing == 0 && calls(&c).len() == 1
    })
    .await;
    assert!(begun.elapsed() >= Duration::from_secs(2));
    assert!(begun.elapsed() < Duration::from_secs(3));
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn stop_waits_for_in_flight_reconciles_then_nothing_runs() {
    let finished = Arc::new(AtomicUsize::new(0));
    let c = Controller::builder("graceful", {
        let finished = finished.clone();
        scripted(move |_, _| {
            let finished = finished.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                Ok(Action::done())
            }
        })
    })
    .build()
    .unwrap();
    let (events, stop, task) = start(&c);
    send(&events, "a").await;
    eventually("1 call", Duration::from_secs(1), || calls(&c).len() == 1).await;
    send(&events, "b").await;
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "the in-flight reconcile finished"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(calls(&c).len(), 1, "no new request was taken after stop");
}

#[tokio::test(start_paused = true)]
async fn stuck_reconciles_are_cancelled_after_the_grace_period() {
    let c = Controller::builder(
        "stuck",
        scripted(|_, ctx| async move {
            ctx.cancelled().await;
            Ok(Action::done())
        }),
    )
    .options(rudder_controller::Options::new().shutdown_grace(Duration::from_secs(5)))
    .build()
    .unwrap();
    let (events, stop, task) = start(&c);
    send(&events, "a").await;
    eventually("1 call", Duration::from_secs(1), || calls(&c).len() == 1).await;
    let stopped = Instant::now();
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(stopped.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn names_are_unique_and_required() {
    let first = Controller::builder("unique", scripted(|_, _| async { Ok(Action::done()) }))
        .build()
        .unwrap();
    let second =
        Controller::builder("unique", scripted(|_, _| async { Ok(Action::done()) })).build();
    assert!(matches!(second, Err(BuildError::DuplicateName(name)) if name == "unique"));
    drop(first);
    // The name is free again once the first controller is gone.
    Controller::builder("unique", scripted(|_, _| async { Ok(Action::done()) }))
        .build()
        .unwrap();
    let empty = Controller::builder("", scripted(|_, _| async { Ok(Action::done()) })).build();
    assert!(matches!(empty, Err(BuildError::EmptyName)));
}

/// A source that never syncs, as a watch on a type the server does not serve.
struct NeverSynced(Synced);

impl Source<ConfigMap> for NeverSynced {
    fn start(self: Box<Self>) -> Result<Started<ConfigMap>, SourceError> {
        Ok(Started::new(Box::pin(futures::stream::pending()), self.0))
    }
}

#[tokio::test(start_paused = true)]
async fn sources_that_never_sync_time_out_clearly() {
    let c = Controller::builder("unsynced", scripted(|_, _| async { Ok(Action::done()) }))
        .options(rudder_controller::Options::new().cache_sync_timeout(Duration::from_secs(10)))
        .build()
        .unwrap();
    c.watch(NeverSynced(Synced::new()), EnqueueObject, vec![])
        .unwrap();
    let (_, source) = channel::<ConfigMap>(1);
    c.watch(source, EnqueueObject, vec![]).unwrap();
    let begun = Instant::now();
    let err = c.run(CancellationToken::new()).await.unwrap_err();
    assert_eq!(begun.elapsed(), Duration::from_secs(10));
    assert!(
        matches!(
            err,
            RunError::CacheSyncTimeout {
                pending: 1,
                total: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("1 of 2 sources did not sync"));
}

#[tokio::test(start_paused = true)]
async fn a_watch_added_after_start_delivers() {
    let c = Controller::builder("late-watch", scripted(|_, _| async { Ok(Action::done()) }))
        .build()
        .unwrap();
    let (_early, stop, task) = start(&c);
    eventually("the controller synced", Duration::from_secs(1), || {
        c.has_synced()
    })
    .await;
    let (late, source) = channel::<ConfigMap>(4);
    c.watch(source, EnqueueObject, vec![]).unwrap();
    send(&late, "late").await;
    eventually("1 call", Duration::from_secs(1), || calls(&c).len() == 1).await;
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn predicates_filter_before_the_handler() {
    let c = Controller::builder("filtered", scripted(|_, _| async { Ok(Action::done()) }))
        .build()
        .unwrap();
    let (events, source) = channel::<ConfigMap>(4);
    let only_b = |e: &Event<ConfigMap>| e.object().metadata.name.as_deref() == Some("b");
    c.watch(source, EnqueueObject, vec![Box::new(only_b)])
        .unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (c, stop) = (c.clone(), stop.clone());
        async move { c.run(stop).await }
    });
    send(&events, "a").await;
    send(&events, "b").await;
    eventually("1 call", Duration::from_secs(1), || calls(&c).len() == 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reconciled: Vec<_> = c
        .reconciler()
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(r, _)| r.to_string())
        .collect();
    assert_eq!(reconciled, ["ns/b"]);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// Four workers, a burst of changes on a few keys from several producers: no key is ever
/// reconciled twice at once, and each key's last reconcile sees its last change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_workers_never_overlap_on_a_key_and_see_the_last_change() {
    struct Checker {
        in_flight: Mutex<HashSet<Request>>,
        /// The current desired version of each key, bumped by the producers.
        desired: Arc<Mutex<HashMap<Request, u64>>>,
        /// The version each key's latest reconcile saw.
        seen: Mutex<HashMap<Request, u64>>,
    }
    impl Reconciler for Checker {
        type Error = std::convert::Infallible;
        async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
            assert!(
                self.in_flight.lock().unwrap().insert(request.clone()),
                "{request} reconciled twice at once"
            );
            let version = self
                .desired
                .lock()
                .unwrap()
                .get(&request)
                .copied()
                .unwrap_or(0);
            tokio::task::yield_now().await;
            self.seen.lock().unwrap().insert(request.clone(), version);
            self.in_flight.lock().unwrap().remove(&request);
            Ok(Action::done())
        }
    }
    let desired: Arc<Mutex<HashMap<Request, u64>>> = Arc::default();
    let c = Controller::builder(
        "four-workers",
        Checker {
            in_flight: Mutex::default(),
            desired: desired.clone(),
            seen: Mutex::default(),
        },
    )
    .options(rudder_controller::Options::new().workers(4))
    .build()
    .unwrap();
    let (events, stop, task) = start(&c);
    let producers: Vec<_> = (0..4)
        .map(|p| {
            let (events, desired) = (events.clone(), desired.clone());
            tokio::spawn(async move {
                for i in 0..500u64 {
                    let name = format!("key-{}", (i + p) % 5);
                    let request = Request::namespaced("ns", &name);
                    *desired.lock().unwrap().entry(request).or_default() += 1;
                    send(&events, &name).await;
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let done = {
            let desired = desired.lock().unwrap();
            let seen = c.reconciler().seen.lock().unwrap();
            desired.iter().all(|(k, v)| seen.get(k) == Some(v))
        };
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the last changes were never reconciled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_panic_recovery_a_panic_ends_run() {
    let c = Controller::builder(
        "unrecovered",
        scripted(|_, _| async {
            panic!("boom");
        }),
    )
    .options(rudder_controller::Options::new().recover_panic(false))
    .build()
    .unwrap();
    let (events, _stop, task) = start(&c);
    send(&events, "a").await;
    let ended = timeout_join(task).await;
    assert!(
        ended.is_panic(),
        "run should end by re-raising the reconcile's panic"
    );
}

async fn timeout_join(
    task: tokio::task::JoinHandle<rudder_controller::Result<()>>,
) -> tokio::task::JoinError {
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run did not end")
        .expect_err("run returned instead of panicking")
}

#[tokio::test(start_paused = true)]
async fn aborting_run_stops_its_workers_and_watches() {
    let c = Controller::builder("aborted", scripted(|_, _| async { Ok(Action::done()) }))
        .build()
        .unwrap();
    let (events, _stop, task) = start(&c);
    send(&events, "a").await;
    eventually("1 call", Duration::from_secs(1), || calls(&c).len() == 1).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    // The watch's pump has stopped and dropped its receiver: sends fail (within a few
    // tries), and nothing sent is reconciled, since the workers went with `run`.
    let deadline = Instant::now() + Duration::from_secs(1);
    let object = cm("b", "1");
    while events
        .send(Event::Generic {
            object: Arc::clone(&object),
        })
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "the watch outlived run");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(calls(&c).len(), 1);
}

/// A terminal error's message does not repeat its cause: a chain prints it once.
#[test]
fn a_terminal_errors_chain_names_its_cause_once() {
    let error = TerminalError::new("spec.replicas is negative");
    assert_eq!(
        rudder_core::ErrorChain(&error).to_string(),
        "terminal error: spec.replicas is negative"
    );
}

/// A reconciler's error may be a boxed error (or anything converting into one, such as
/// `anyhow::Error`); a terminal one inside a box is still found.
#[tokio::test(start_paused = true)]
async fn a_boxed_reconciler_error_is_retried_and_a_boxed_terminal_one_is_not() {
    struct Boxed(Mutex<Vec<String>>);
    impl Reconciler for Boxed {
        type Error = rudder_core::BoxError;
        async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
            self.0.lock().unwrap().push(request.name().to_owned());
            if request.name() == "fatal" {
                return Err(TerminalError::new("cannot ever work").into());
            }
            Err("try again".into())
        }
    }
    let c = Controller::builder("boxed", Boxed(Mutex::default()))
        .build()
        .unwrap();
    let (events, stop, task) = start(&c);
    send(&events, "fatal").await;
    send(&events, "retried").await;
    let count = |name: &str| {
        c.reconciler()
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|n| *n == name)
            .count()
    };
    eventually("three retries", Duration::from_secs(5), || {
        count("retried") >= 3
    })
    .await;
    assert_eq!(count("fatal"), 1, "a boxed terminal error is not retried");
    stop.cancel();
    task.await.unwrap().unwrap();
}
