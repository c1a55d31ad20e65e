//! The [`EventHandler`] contract: which requests an event puts on the controller's [`Queue`],
//! and at which priority.
//!
//! Requests for old news (objects from the first list, resyncs that changed nothing; see
//! [`Event::is_low_priority`]) go in at [`LOW_PRIORITY`], everything else at priority 0, so
//! that fresh changes overtake a backlog; the work queue's ageing keeps old news from
//! waiting forever. [`enqueue`] applies the rule; a handler that queues through it keeps it.

use kube::Resource;
use rudder_workqueue::{AddOptions, WorkQueue};

use crate::{Event, Request};

/// The priority of requests for old news: objects from the first list and no-op resyncs.
pub const LOW_PRIORITY: i32 = -100;

/// The work queue controllers reconcile from: each queued request carries the causes of its
/// pending reconcile ([`QueuedCauses`](crate::cause::QueuedCauses)).
pub type Queue = WorkQueue<Request, crate::cause::QueuedCauses>;

/// Turns events into requests on the queue.
pub trait EventHandler<K>: Send + Sync {
    /// Queues the requests `event` calls for.
    fn handle(&self, event: &Event<K>, queue: &Queue);
}

/// Any `Fn(&Event<K>, &Queue)` is a handler: the way to map items of a raw source (a
/// channel of anything) to requests.
impl<K, F> EventHandler<K> for F
where
    F: Fn(&Event<K>, &Queue) + Send + Sync,
{
    fn handle(&self, event: &Event<K>, queue: &Queue) {
        self(event, queue);
    }
}

impl<K> EventHandler<K> for Box<dyn EventHandler<K>> {
    fn handle(&self, event: &Event<K>, queue: &Queue) {
        (**self).handle(event, queue);
    }
}

/// Queues `request` at the priority `event` deserves.
pub fn enqueue<K: Resource>(queue: &Queue, event: &Event<K>, request: Request) {
    let priority = if event.is_low_priority() {
        LOW_PRIORITY
    } else {
        0
    };
    queue.add_with(request, AddOptions::new().priority(priority));
}
