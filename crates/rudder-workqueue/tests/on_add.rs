//! The add hook sees every add, merged or not, in order, before the key is queued.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rudder_workqueue::WorkQueue;

#[tokio::test]
async fn the_hook_sees_every_add() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let queue = WorkQueue::<&'static str>::builder()
        .on_add({
            let seen = Arc::clone(&seen);
            move |key| seen.lock().unwrap().push(*key)
        })
        .build();
    queue.add("a");
    queue.add("a");
    queue.add_after("b", Duration::from_secs(60));
    queue.add_rate_limited("c");
    assert_eq!(*seen.lock().unwrap(), ["a", "a", "b", "c"]);
    assert_eq!(queue.len(), 1, "a once; b and c wait");
}
