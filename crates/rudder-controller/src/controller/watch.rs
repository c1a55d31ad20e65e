//! [`WatchSpec`]: a source, its predicates and its handler, with the key type erased, and the
//! task pumping the source's events into the queue.

use std::fmt;

use futures::stream::StreamExt;
use rudder_handler::{EventHandler, Predicate, Queue, Source, SourceError, Synced};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use super::Controller;

/// A source, its predicates and its handler, with the source's type erased: what
/// [`Controller::add_watch`] takes.
pub struct WatchSpec(pub(super) Box<dyn ErasedWatch>);

impl WatchSpec {
    /// Prepares a watch of `source` through `predicates` into `handler`.
    pub fn new<K, H>(
        source: impl Source<K>,
        handler: H,
        predicates: Vec<Box<dyn Predicate<K>>>,
    ) -> Self
    where
        K: Send + Sync + 'static,
        H: EventHandler<K> + 'static,
    {
        Self(Box::new(Watch {
            source: Box::new(source),
            handler,
            predicates,
        }))
    }
}

impl fmt::Debug for WatchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchSpec").finish_non_exhaustive()
    }
}

/// A watch with its key type erased, so a controller can hold watches of many types.
pub(super) trait ErasedWatch: Send {
    /// Starts the source and the task pumping its events into `queue` until `stop`.
    fn spawn(
        self: Box<Self>,
        queue: Queue,
        stop: CancellationToken,
    ) -> Result<(Synced, JoinHandle<()>), SourceError>;
}

struct Watch<K, H> {
    source: Box<dyn Source<K>>,
    handler: H,
    predicates: Vec<Box<dyn Predicate<K>>>,
}

impl<K, H> ErasedWatch for Watch<K, H>
where
    K: Send + Sync + 'static,
    H: EventHandler<K> + 'static,
{
    fn spawn(
        self: Box<Self>,
        queue: Queue,
        stop: CancellationToken,
    ) -> Result<(Synced, JoinHandle<()>), SourceError> {
        let Watch {
            source,
            handler,
            predicates,
        } = *self;
        let started = source.start()?;
        let mut events = started.events;
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: the controller keeps the handle and its run joins it (stop_watches)"
        )]
        let task = tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    biased;
                    () = stop.cancelled() => return,
                    event = events.next() => match event {
                        Some(event) => event,
                        None => return,
                    },
                };
                if predicates.iter().all(|p| p.filter(&event)) {
                    handler.handle(&event, &queue);
                }
            }
        });
        Ok((started.synced, task))
    }
}
