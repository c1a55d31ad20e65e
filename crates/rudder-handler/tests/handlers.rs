//! Event handlers and sources: which requests land on the queue, at what priority.
#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::ObjectMeta;
use rudder_core::Event;
use rudder_core::EventHandler;
use rudder_core::LOW_PRIORITY;
use rudder_core::Queue;
use rudder_core::Request;
use rudder_core::Source;
use rudder_core::Synced;
use rudder_handler::{
    EnqueueMapped, EnqueueObject, EnqueueOwner, HandlerFuncs, channel, from_stream,
};

fn owner(kind: &str, api_version: &str, name: &str, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        controller: Some(controller),
        ..OwnerReference::default()
    }
}

fn pod(rv: &str, owners: Vec<OwnerReference>) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            namespace: Some("ns".into()),
            name: Some("p".into()),
            resource_version: Some(rv.into()),
            owner_references: Some(owners),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    })
}

/// Everything on the queue as (request, priority), in the order handed out.
fn drain(queue: &Queue) -> Vec<(String, i32)> {
    std::iter::from_fn(|| {
        queue
            .try_get()
            .map(|item| (item.key().to_string(), item.priority()))
    })
    .collect()
}

#[test]
fn enqueue_object_puts_old_news_at_low_priority() {
    let q = Queue::builder_with_payload().priority_aging(None).build();
    let listed = Event::Create {
        object: pod("1", vec![]),
        initial_list: true,
    };
    EnqueueObject.handle(&listed, &q);
    assert_eq!(drain(&q), [("ns/p".to_string(), LOW_PRIORITY)]);

    let resync = Event::Update {
        old: pod("1", vec![]),
        new: pod("1", vec![]),
    };
    EnqueueObject.handle(&resync, &q);
    assert_eq!(drain(&q), [("ns/p".to_string(), LOW_PRIORITY)]);

    let change = Event::Update {
        old: pod("1", vec![]),
        new: pod("2", vec![]),
    };
    EnqueueObject.handle(&change, &q);
    let deleted = Event::Delete {
        object: pod("2", vec![]),
        final_state_unknown: true,
    };
    EnqueueObject.handle(&deleted, &q);
    assert_eq!(
        drain(&q),
        [("ns/p".to_string(), 0)],
        "deduplicated, at priority 0"
    );
}

#[test]
fn enqueue_owner_takes_the_controller_of_the_right_kind_and_group() {
    let q = Queue::default();
    let owners = vec![
        owner("Deployment", "apps/v1", "controller", true),
        owner("Deployment", "apps/v1", "other", false),
        owner("Deployment", "extensions/v1beta1", "wrong-group", true),
        owner("StatefulSet", "apps/v1", "wrong-kind", true),
    ];
    let event = Event::Create {
        object: pod("1", owners),
        initial_list: false,
    };
    EnqueueOwner::<Deployment>::new().handle(&event, &q);
    assert_eq!(drain(&q), [("ns/controller".to_string(), 0)]);

    EnqueueOwner::<Deployment>::new()
        .all_owners()
        .handle(&event, &q);
    let mut got: Vec<_> = drain(&q).into_iter().map(|(r, _)| r).collect();
    got.sort();
    assert_eq!(got, ["ns/controller", "ns/other"]);
}

#[test]
fn enqueue_owner_reaches_old_and_new_owners_and_respects_scope() {
    let q = Queue::default();
    let moved = Event::Update {
        old: pod("1", vec![owner("Deployment", "apps/v1", "before", true)]),
        new: pod("2", vec![owner("Deployment", "apps/v1", "after", true)]),
    };
    EnqueueOwner::<Deployment>::new().handle(&moved, &q);
    let mut got: Vec<_> = drain(&q).into_iter().map(|(r, _)| r).collect();
    got.sort();
    assert_eq!(got, ["ns/after", "ns/before"]);

    // A cluster-scoped owner has no namespace.
    let owned_by_ns = Event::Create {
        object: pod("1", vec![owner("Namespace", "v1", "team-a", true)]),
        initial_list: false,
    };
    EnqueueOwner::<Namespace>::new().handle(&owned_by_ns, &q);
    assert_eq!(
        q.try_get().map(|i| i.key().clone()),
        Some(Request::cluster("team-a"))
    );

    // A cluster-scoped object cannot have a namespaced owner: ignored.
    let orphan = Event::Create {
        object: Arc::new(Namespace {
            metadata: ObjectMeta {
                name: Some("n".into()),
                owner_references: Some(vec![owner("ConfigMap", "v1", "cm", true)]),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        }),
        initial_list: false,
    };
    EnqueueOwner::<ConfigMap>::new().handle(&orphan, &q);
    assert!(q.try_get().is_none());
}

#[test]
fn enqueue_mapped_and_closures() {
    let q = Queue::default();
    let mapped = EnqueueMapped(|p: &Pod| {
        let rv = p.metadata.resource_version.clone().unwrap_or_default();
        vec![Request::namespaced("ns", &format!("for-{rv}"))]
    });
    mapped.handle(
        &Event::Update {
            old: pod("1", vec![]),
            new: pod("2", vec![]),
        },
        &q,
    );
    let mut got: Vec<_> = drain(&q).into_iter().map(|(r, _)| r).collect();
    got.sort();
    assert_eq!(got, ["ns/for-1", "ns/for-2"]);

    let funcs = HandlerFuncs::<Pod>::new().on_delete(|p, unknown, q| {
        if unknown {
            q.add(Request::from_object(p).unwrap());
        }
    });
    funcs.handle(
        &Event::Delete {
            object: pod("1", vec![]),
            final_state_unknown: false,
        },
        &q,
    );
    assert!(q.try_get().is_none());
    funcs.handle(
        &Event::Delete {
            object: pod("1", vec![]),
            final_state_unknown: true,
        },
        &q,
    );
    assert_eq!(drain(&q), [("ns/p".to_string(), 0)]);
    // No closure for creates: nothing happens.
    funcs.handle(
        &Event::Create {
            object: pod("1", vec![]),
            initial_list: false,
        },
        &q,
    );
    assert!(q.try_get().is_none());
}

#[tokio::test]
async fn channel_and_stream_sources_deliver_in_order_and_are_synced() {
    let (tx, source) = channel::<Pod>(4);
    let source: Box<dyn Source<Pod>> = Box::new(source);
    let started = source.start().unwrap();
    assert!(started.synced.is_synced());
    let mut events = started.events;
    for rv in ["1", "2"] {
        tx.send(Event::Generic {
            object: pod(rv, vec![]),
        })
        .await
        .unwrap();
    }
    drop(tx);
    let got: Vec<_> = events
        .by_ref()
        .map(|e| e.object().metadata.resource_version.clone().unwrap())
        .collect()
        .await;
    assert_eq!(got, ["1", "2"]);

    let stream = futures::stream::iter([Event::Generic {
        object: pod("9", vec![]),
    }]);
    let source: Box<dyn Source<Pod>> = Box::new(from_stream(stream));
    let started = source.start().unwrap();
    assert!(started.synced.is_synced());
    assert_eq!(started.events.count().await, 1);
}

#[tokio::test]
async fn a_dropped_controller_closes_the_channel() {
    let (tx, source) = channel::<Pod>(1);
    drop(source);
    let sent = tx
        .send(Event::Generic {
            object: pod("1", vec![]),
        })
        .await;
    assert!(sent.is_err());
}

#[tokio::test]
async fn synced_wakes_waiters() {
    let synced = Synced::new();
    assert!(!synced.is_synced());
    let waiter = {
        let synced = synced.clone();
        tokio::spawn(async move { synced.wait().await })
    };
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    synced.mark();
    waiter.await.unwrap();
    assert!(synced.is_synced());
}
