//! Sources of events: [`channel`] (events pushed from outside the cluster) and
//! [`from_stream`] (any stream of events); the [`Source`] contract itself is rudder-core's
//! (its one public path), and [`Kind`](crate::Kind) reads a shared informer from rudder-cache.

use futures::stream::{Stream, StreamExt};
use tokio::sync::mpsc;

pub(crate) use rudder_core::{Source, SourceError, Started, Synced};

use crate::Event;

/// The sending half of a [`channel`] source.
#[derive(Debug)]
pub struct EventSender<K>(mpsc::Sender<Event<K>>);

impl<K> Clone for EventSender<K> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

/// The receiving half of a [`channel`]: give it to a controller's watch.
#[derive(Debug)]
pub struct ChannelSource<K>(mpsc::Receiver<Event<K>>);

/// The error of a send to a [`channel`] source whose controller is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceClosed;

impl std::fmt::Display for SourceClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the controller watching this source has stopped")
    }
}

impl std::error::Error for SourceClosed {}

impl<K> EventSender<K> {
    /// Sends an event, waiting while the channel is full.
    pub async fn send(&self, event: Event<K>) -> Result<(), SourceClosed> {
        self.0.send(event).await.map_err(|_| SourceClosed)
    }
}

/// A source fed from outside the cluster (controller-runtime's channel source): events sent
/// on the returned sender reach the watch's predicates and handler. Holds at most `capacity`
/// events not yet taken; senders wait beyond that. Synced from the start.
pub fn channel<K: Send + Sync + 'static>(capacity: usize) -> (EventSender<K>, ChannelSource<K>) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    (EventSender(tx), ChannelSource(rx))
}

impl<K: Send + Sync + 'static> Source<K> for ChannelSource<K> {
    fn start(self: Box<Self>) -> Result<Started<K>, SourceError> {
        let events = futures::stream::unfold(self.0, |mut rx| async move {
            let event = rx.recv().await?;
            Some((event, rx))
        })
        .boxed();
        Ok(Started::new(events, Synced::already()))
    }
}

/// A source from any stream of events.
pub struct StreamSource<S> {
    stream: S,
    synced: Synced,
}

impl<S> std::fmt::Debug for StreamSource<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSource")
            .field("synced", &self.synced.is_synced())
            .finish_non_exhaustive()
    }
}

/// A source that yields what `stream` yields. It counts as synced from the start; use
/// [`from_stream_with_sync`] to turn the signal on yourself.
pub fn from_stream<K, S>(stream: S) -> StreamSource<S>
where
    S: Stream<Item = Event<K>> + Send + 'static,
{
    StreamSource {
        stream,
        synced: Synced::already(),
    }
}

/// A source that yields what `stream` yields and counts as synced when `synced` turns on.
pub fn from_stream_with_sync<K, S>(stream: S, synced: Synced) -> StreamSource<S>
where
    S: Stream<Item = Event<K>> + Send + 'static,
{
    StreamSource { stream, synced }
}

impl<K, S> Source<K> for StreamSource<S>
where
    S: Stream<Item = Event<K>> + Send + 'static,
{
    fn start(self: Box<Self>) -> Result<Started<K>, SourceError> {
        let Self { stream, synced } = *self;
        Ok(Started::new(stream.boxed(), synced))
    }
}
