//! Why each reconcile ran: the causes a controller hands its reconciler (`Context::causes`),
//! puts on the reconcile's span and counts in `rudder_controller_reconcile_triggers_total`:
//! the watch and event that queued the key (with the object, for a watch of objects),
//! triggers merged while the key waited (the first, the last and a count), and the worker's
//! own re-adds (a requeue, a retry after an error).

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::ObjectMeta;
use metrics_exporter_prometheus::PrometheusBuilder;
use rudder_controller::{Controller, WatchSpec};
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Event;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_envtest::poll::Poll;
use rudder_handler::{EnqueueObject, EventSender, channel};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

fn cm(name: &str, rv: &str) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            resource_version: Some(rv.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    })
}

/// What each reconcile was told: the key, its causes' count, first and latest, as text.
type Seen = Arc<Mutex<Vec<(String, u32, String, String)>>>;

/// Records its causes; blocks the key `held` until `release` is notified; fails the first
/// reconcile of `fails`, and asks for `requeues` to run once more.
struct Recording {
    seen: Seen,
    release: Arc<Notify>,
}

impl Reconciler for Recording {
    type Error = std::io::Error;
    async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Self::Error> {
        let (count, first, latest) = ctx.causes().map_or((0, String::new(), String::new()), |c| {
            (c.count(), c.first().to_string(), c.latest().to_string())
        });
        let earlier = self
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(key, ..)| *key == request.name())
            .count();
        self.seen
            .lock()
            .unwrap()
            .push((request.name().to_owned(), count, first, latest));
        match (request.name(), earlier) {
            ("held", 0) => {
                self.release.notified().await;
                Ok(Action::done())
            }
            ("fails", 0) => Err(std::io::Error::other("the first try fails")),
            ("requeues", 0) => Ok(Action::requeue_after(Duration::from_millis(10))),
            ("later", 0) => Ok(Action::requeue_after(Duration::from_secs(600))),
            _ => Ok(Action::done()),
        }
    }
}

fn seen_of(seen: &Seen, key: &str) -> Vec<(u32, String, String)> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(k, ..)| k == key)
        .map(|(_, n, first, latest)| (*n, first.clone(), latest.clone()))
        .collect()
}

async fn until(what: &str, cond: impl FnMut() -> bool) {
    Poll::new(what, Duration::from_secs(10))
        .every(Duration::from_millis(1))
        .until(cond)
        .await;
}

#[tokio::test]
async fn each_reconcile_is_told_what_queued_it() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let seen = Seen::default();
    let release = Arc::new(Notify::new());
    let c = Controller::builder(
        "causes",
        Recording {
            seen: Arc::clone(&seen),
            release: Arc::clone(&release),
        },
    )
    .build()
    .unwrap();
    // One watch of objects labelled as a primary watch, one plain (a channel of anything).
    let (objects, source) = channel::<ConfigMap>(16);
    c.add_watch(WatchSpec::objects(source, EnqueueObject, vec![]).labelled("for"))
        .unwrap();
    let (plain, plain_source): (EventSender<ConfigMap>, _) = channel(16);
    c.watch(plain_source, EnqueueObject, vec![]).unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (c, stop) = (c.clone(), stop.clone());
        async move { c.run(stop).await }
    });

    // The one worker is held by `held`: what arrives for `waiting` meanwhile is merged.
    objects
        .send(Event::Create {
            object: cm("held", "1"),
            initial_list: true,
        })
        .await
        .unwrap();
    until("held reconciling", || !seen_of(&seen, "held").is_empty()).await;
    objects
        .send(Event::Create {
            object: cm("waiting", "2"),
            initial_list: false,
        })
        .await
        .unwrap();
    objects
        .send(Event::Update {
            old: cm("waiting", "2"),
            new: cm("waiting", "3"),
        })
        .await
        .unwrap();
    plain
        .send(Event::Generic {
            object: cm("waiting", "3"),
        })
        .await
        .unwrap();
    until("the three events queued", || c.queue().len() == 1).await;
    // Let the watch tasks hand on everything sent before the worker is freed.
    tokio::task::yield_now().await;
    release.notify_one();
    until("waiting reconciled", || {
        !seen_of(&seen, "waiting").is_empty()
    })
    .await;
    assert_eq!(
        seen_of(&seen, "held"),
        [(
            1,
            "for/initial ConfigMap ns/held@1".to_owned(),
            "for/initial ConfigMap ns/held@1".to_owned()
        )]
    );
    assert_eq!(
        seen_of(&seen, "waiting"),
        [(
            3,
            "for/create ConfigMap ns/waiting@2".to_owned(),
            "watch/generic".to_owned()
        )]
    );

    // The worker's own re-adds name themselves.
    for name in ["fails", "requeues"] {
        objects
            .send(Event::Create {
                object: cm(name, "9"),
                initial_list: false,
            })
            .await
            .unwrap();
    }
    until("fails and requeues ran twice", || {
        seen_of(&seen, "fails").len() == 2 && seen_of(&seen, "requeues").len() == 2
    })
    .await;
    assert_eq!(seen_of(&seen, "fails")[1].1, "retry/error");
    assert_eq!(seen_of(&seen, "requeues")[1].1, "requeue/requeue_after");

    // An event for a key waiting out a long requeue runs it now, and the run is the event's.
    objects
        .send(Event::Create {
            object: cm("later", "10"),
            initial_list: false,
        })
        .await
        .unwrap();
    until("later ran once", || seen_of(&seen, "later").len() == 1).await;
    objects
        .send(Event::Update {
            old: cm("later", "10"),
            new: cm("later", "11"),
        })
        .await
        .unwrap();
    until("later ran again", || seen_of(&seen, "later").len() == 2).await;
    assert_eq!(
        seen_of(&seen, "later")[1],
        (
            2,
            "for/update ConfigMap ns/later@11".to_owned(),
            "requeue/requeue_after".to_owned()
        )
    );

    stop.cancel();
    task.await.unwrap().unwrap();
    let text = handle.render();
    for line in [
        r#"rudder_controller_reconcile_triggers_total{controller="causes",source="for",event="initial"} 1"#,
        r#"rudder_controller_reconcile_triggers_total{controller="causes",source="for",event="create"} 4"#,
        r#"rudder_controller_reconcile_triggers_total{controller="causes",source="for",event="update"} 1"#,
        r#"rudder_controller_reconcile_triggers_total{controller="causes",source="retry",event="error"} 1"#,
        r#"rudder_controller_reconcile_triggers_total{controller="causes",source="requeue",event="requeue_after"} 1"#,
    ] {
        assert!(text.contains(line), "missing {line} in:\n{text}");
    }
}

/// Each reconcile's key, its first cause, when that was recorded and when the reconcile ran.
type Timed = Arc<Mutex<Vec<(String, String, SystemTime, SystemTime)>>>;

/// Records each key's first cause and when it was recorded, and when the reconcile ran.
struct Times(Timed);

impl Reconciler for Times {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Self::Error> {
        let ran = SystemTime::now();
        let causes = ctx.causes().expect("a watch's add names its cause");
        let first = causes.first();
        self.0.lock().unwrap().push((
            request.name().to_owned(),
            first.to_string(),
            first.at(),
            ran,
        ));
        Ok(Action::done())
    }
}

#[tokio::test]
async fn events_ready_together_each_name_their_own_event_and_object() {
    let seen = Timed::default();
    let c = Controller::builder("batch", Times(Arc::clone(&seen)))
        .build()
        .unwrap();
    let (objects, source) = channel::<ConfigMap>(16);
    c.add_watch(WatchSpec::objects(source, EnqueueObject, vec![]).labelled("for"))
        .unwrap();
    let before = SystemTime::now();
    // All waiting in the channel when the watch starts: taken as one batch, whose causes
    // share one reading of the clock but each keeps its event and object.
    let events = [
        Event::Create {
            object: cm("a", "1"),
            initial_list: true,
        },
        Event::Update {
            old: cm("b", "1"),
            new: cm("b", "2"),
        },
        Event::Create {
            object: cm("c", "3"),
            initial_list: false,
        },
        Event::Delete {
            object: cm("d", "4"),
            final_state_unknown: false,
        },
        Event::Update {
            old: cm("e", "4"),
            new: cm("e", "5"),
        },
        Event::Generic {
            object: cm("f", "6"),
        },
    ];
    for event in events {
        objects.send(event).await.unwrap();
    }
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (c, stop) = (c.clone(), stop.clone());
        async move { c.run(stop).await }
    });
    until("six reconciles", || seen.lock().unwrap().len() == 6).await;
    stop.cancel();
    task.await.unwrap().unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let causes: Vec<_> = seen.iter().map(|(_, cause, ..)| cause.as_str()).collect();
    assert_eq!(
        causes,
        [
            "for/initial ConfigMap ns/a@1",
            "for/update ConfigMap ns/b@2",
            "for/create ConfigMap ns/c@3",
            "for/delete ConfigMap ns/d@4",
            "for/update ConfigMap ns/e@5",
            "for/generic ConfigMap ns/f@6",
        ]
    );
    for (key, _, at, ran) in &seen {
        assert!(
            before <= *at && at <= ran,
            "{key}: recorded at {at:?}, not between the send ({before:?}) and its run ({ran:?})"
        );
    }
}
