//! What a queued key carries: merged on every add while it waits, handed to the worker with
//! the key, kept for the next run when added during processing, and dropped with the key.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rudder_workqueue::{AddOptions, Payload, WorkQueue};

/// The adds merged into one run: the first's tag, the last's, and how many.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Tags {
    first: Option<&'static str>,
    last: Option<&'static str>,
    count: u32,
}

impl Tags {
    fn of(tag: &'static str) -> Self {
        Self {
            first: Some(tag),
            last: Some(tag),
            count: 1,
        }
    }
}

impl Payload for Tags {
    fn merge(&mut self, later: Self) {
        if later.count == 0 {
            return;
        }
        if self.first.is_none() {
            self.first = later.first;
        }
        self.last = later.last;
        self.count += later.count;
    }
}

fn queue() -> WorkQueue<&'static str, Tags> {
    WorkQueue::builder_with_payload().name("payload").build()
}

#[tokio::test]
async fn adds_merged_into_one_run_hand_their_payloads_to_the_worker() {
    let q = queue();
    q.add_with_payload("a", AddOptions::new(), Tags::of("watch"));
    q.add_with_payload("a", AddOptions::new(), Tags::of("owns"));
    // A plain add carries the handle's payload: the default here, which changes nothing.
    q.add("a");
    q.add_with_payload("a", AddOptions::new(), Tags::of("last"));
    let mut item = q.get().await.unwrap();
    assert_eq!(item.payload().count, 3);
    let tags = item.take_payload();
    assert_eq!((tags.first, tags.last), (Some("watch"), Some("last")));
    assert_eq!(item.payload(), &Tags::default(), "taken");
}

#[tokio::test]
async fn an_add_while_processing_carries_over_to_the_next_run() {
    let q = queue();
    q.add_with_payload("a", AddOptions::new(), Tags::of("one"));
    let item = q.get().await.unwrap();
    q.add_with_payload("a", AddOptions::new(), Tags::of("two"));
    q.add_with_payload("a", AddOptions::new(), Tags::of("three"));
    assert_eq!(item.payload(), &Tags::of("one"));
    drop(item);
    let item = q.get().await.unwrap();
    assert_eq!(item.payload().count, 2);
    assert_eq!(item.payload().first, Some("two"));
}

#[tokio::test]
async fn a_handle_carries_its_payload_to_its_adds_and_to_its_clones() {
    let q = queue();
    let mut watch = q.clone();
    assert_eq!(watch.set_payload(Tags::of("for")), Tags::default());
    watch.add("a");
    watch.clone().add_after("b", Duration::ZERO);
    assert_eq!(
        q.payload(),
        &Tags::default(),
        "the other handle is unchanged"
    );
    q.add("a");
    let a = q.get().await.unwrap();
    assert_eq!(a.payload(), &Tags::of("for"));
    let b = q.get().await.unwrap();
    assert_eq!(b.payload(), &Tags::of("for"));
}

#[tokio::test(start_paused = true)]
async fn a_key_put_back_keeps_what_it_carried_and_shutdown_drops_the_delayed() {
    let q = queue();
    q.add_with_payload("a", AddOptions::new(), Tags::of("watch"));
    let mut item = q.get().await.unwrap();
    // Not run: put back with what it carried.
    q.add_with_payload("a", AddOptions::new(), item.take_payload());
    drop(item);
    assert_eq!(q.get().await.unwrap().payload(), &Tags::of("watch"));
    q.add_with_payload(
        "d",
        AddOptions::new().after(Duration::from_secs(60)),
        Tags::of("late"),
    );
    q.shutdown();
    q.add_with_payload("e", AddOptions::new(), Tags::of("after shutdown"));
    assert!(
        q.get().await.is_none(),
        "the delayed key and its payload are gone"
    );
}

#[test]
fn a_queue_carrying_nothing_is_one_pointer() {
    assert_eq!(
        size_of::<WorkQueue<u64>>(),
        size_of::<usize>(),
        "the default payload, (), takes no room in a handle"
    );
}
