//! What subscribers get: [`Event`]s (rudder-core's, the one event type), each subscriber's queue ([`EventStream`]), and the
//! registration that replays the store first.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::{FutureExt, Stream, StreamExt};
use kube::Resource;
use rudder_core::Event;
use tokio::sync::mpsc;
use tokio_util::sync::DropGuard;

use super::Informer;
use super::record_panic;
use crate::store::ObjectKey;

impl<K: Resource + Send + Sync + 'static> Informer<K> {
    /// A stream of events with a queue of its own: it first yields an [`Event::Create`] (with
    /// `initial_list` set) for every object already stored, then every change.
    ///
    /// The queue is unbounded, so a consumer that falls behind never slows the watch or
    /// other consumers; its backlog (one small event per change, sharing the stored `Arc`s)
    /// grows instead, and it sees every event in order when it catches up. Dropping the
    /// stream unregisters it. The stream ends when the informer stops.
    pub fn subscribe(&self) -> EventStream<K> {
        self.subscribe_holding(Some(Arc::clone(&self._handles)))
    }

    /// A subscription; with `handle`, it keeps the informer running like a handle does.
    pub(crate) fn subscribe_holding(&self, handle: Option<Arc<DropGuard>>) -> EventStream<K> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut subscribers = self.shared.subscribers();
        self.shared.store.for_each(|obj| {
            let _ = tx.send(Event::Create {
                object: Arc::clone(obj),
                initial_list: true,
            });
        });
        if !self.shared.token.is_cancelled() {
            subscribers.push(tx);
        }
        EventStream {
            rx,
            _handle: handle,
        }
    }

    /// Registers an async handler, run on a task of its own over its own [`subscribe`]
    /// queue: one event at a time, in order, each awaited before the next. A slow handler
    /// delays only itself (see [`subscribe`] for what its backlog costs).
    ///
    /// On stop the handler finishes the event it is on and gets no more. A handler that
    /// panics on an event is caught: the panic is logged with the object's key, counted
    /// ([`InformerStats::panics`](crate::InformerStats::panics), and with the `metrics`
    /// feature `rudder_cache_panics_total{function="handler"}`), and the handler goes on with
    /// the next event.
    ///
    /// [`subscribe`]: Informer::subscribe
    pub fn add_handler<F, Fut>(&self, mut handler: F)
    where
        F: FnMut(Event<K>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        // The handler's task does not keep the informer running: it ends with it.
        let mut events = self.subscribe_holding(None);
        let token = self.shared.token.clone();
        let shared = Arc::clone(&self.shared);
        self.shared.tracker.spawn(async move {
            loop {
                let event = tokio::select! {
                    biased;
                    () = token.cancelled() => break,
                    event = events.next() => event,
                };
                let Some(event) = event else { break };
                let key = ObjectKey::of(event.object());
                // The handler is the user's: a panic in it (making the future, or running
                // it) must not end this task, which would silently stop its events. What
                // the handler mutated is its own; the informer's state is not touched here.
                let handled = match crate::unwind::catch(|| handler(event)) {
                    Ok(future) => AssertUnwindSafe(future)
                        .catch_unwind()
                        .await
                        .map_err(|payload| rudder_core::panic_message(&*payload)),
                    Err(message) => Err(message),
                };
                if let Err(message) = handled {
                    record_panic(&shared, "handler", &key, &message);
                }
            }
        });
    }
}

/// The events of one subscriber, from [`Informer::subscribe`].
#[derive(Debug)]
pub struct EventStream<K> {
    rx: mpsc::UnboundedReceiver<Event<K>>,
    /// Keeps the informer running while the stream is held, as a handle does.
    _handle: Option<Arc<DropGuard>>,
}

impl<K> EventStream<K> {
    /// The number of events waiting in this subscriber's queue.
    pub fn backlog(&self) -> usize {
        self.rx.len()
    }
}

impl<K> Stream for EventStream<K> {
    type Item = Event<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

pub(crate) fn send<K>(subscribers: &mut Vec<mpsc::UnboundedSender<Event<K>>>, event: &Event<K>) {
    subscribers.retain(|tx| tx.send(event.clone()).is_ok());
}
