//! Serving one connection: the handshake, hyper's HTTP/1 (or, where negotiated and allowed,
//! HTTP/2) state machine, and a watchdog that closes a connection whose request head is late,
//! that has been idle too long, or that the accept loop sheds at the connection cap.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::acceptor::Acceptor;
use crate::activity::{Activity, Due};
use crate::service::{Adapter, HttpService};
use crate::shedding::Registered;

/// A stream that tells its connection's [`Activity`] when bytes arrive.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read_some();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if polled.is_pending() {
            self.activity.write_blocked();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // hyper flushes after writing all it holds: a flush that completes means every
        // byte of the answers so far is with the kernel.
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        if matches!(polled, Poll::Ready(Ok(()))) {
            self.activity.flushed();
        }
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if polled.is_pending() {
            self.activity.write_blocked();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The limits a connection is held to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) header_read_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
    pub(crate) body_read_timeout: Duration,
    pub(crate) max_body_size: Option<u64>,
    /// Whether to serve HTTP/2 where the acceptor negotiated it.
    pub(crate) http2: bool,
}

/// The signals a connection obeys: `graceful` to finish the request in flight and close,
/// `hard` to close at once.
#[derive(Clone, Debug)]
pub(crate) struct Signals {
    pub(crate) graceful: CancellationToken,
    pub(crate) hard: CancellationToken,
}

/// What woke the connection's task.
enum Event {
    Ended(Result<(), hyper::Error>),
    Timer(Due),
    CloseBy,
    Shed,
    Graceful,
    Hard,
}

/// Serves one accepted connection until it ends, a timeout closes it, it is shed, or the
/// server stops.
pub(crate) async fn serve<A, S, B>(
    tcp: TcpStream,
    acceptor: A,
    service: S,
    limits: Limits,
    signals: Signals,
    registered: Registered,
) where
    A: Acceptor,
    S: HttpService<B>,
{
    let activity = Arc::clone(registered.activity());
    let stream = tokio::select! {
        () = signals.graceful.cancelled() => return,
        () = std::future::poll_fn(|cx| activity.poll_shed(cx)) => {
            // Before the handshake is done no request can be in flight, so the shed holds.
            let shed = registered.settle_shed();
            tracing::debug!(shed, "asked to shed during the handshake, for a new client");
            return;
        }
        handshake = tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)) => {
            match handshake {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(%error, "handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!("handshake timed out");
                    return;
                }
            }
        }
    };
    let http2 = limits.http2 && A::negotiated_http2(&stream);
    activity.handshake_done(http2);
    let io = TokioIo::new(Tracked {
        inner: stream,
        activity: Arc::clone(&activity),
    });
    let adapter = Adapter::new(
        service,
        Arc::clone(&activity),
        limits.max_body_size,
        limits.body_read_timeout,
    );
    #[cfg(feature = "http2")]
    if http2 {
        let conn = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .timer(TokioTimer::new())
            .serve_connection(io, adapter);
        let conn = std::pin::pin!(conn);
        drive(
            conn,
            |conn| conn.graceful_shutdown(),
            &registered,
            &limits,
            &signals,
        )
        .await;
        return;
    }
    // hyper's own header timer is left off: it runs from the moment the connection waits
    // for a head, idle keep-alive waits included, so it cannot tell a slow head from an idle
    // connection. The watchdog below times both.
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true)
        .serve_connection(io, adapter);
    let conn = std::pin::pin!(conn);
    drive(
        conn,
        |conn| conn.graceful_shutdown(),
        &registered,
        &limits,
        &signals,
    )
    .await;
}

/// Runs a connection (HTTP/1 or HTTP/2) until it ends, a timeout closes it, it is shed, or
/// the server stops; `graceful_shutdown` asks it to finish what is in flight and close.
async fn drive<C>(
    mut conn: Pin<&mut C>,
    graceful_shutdown: fn(Pin<&mut C>),
    registered: &Registered,
    limits: &Limits,
    signals: &Signals,
) where
    C: Future<Output = Result<(), hyper::Error>>,
{
    let activity = registered.activity();
    let mut graceful = std::pin::pin!(signals.graceful.cancelled());
    let mut hard = std::pin::pin!(signals.hard.cancelled());
    let far = Instant::now() + Duration::from_secs(86_400 * 365);
    let mut timer = std::pin::pin!(tokio::time::sleep_until(far));
    let mut graceful_sent = false;
    // Once asked to close gracefully (stop, or the idle timeout), a connection that has
    // not ended by this time is dropped; a closing connection is never waited on unbounded.
    let mut close_by: Option<Instant> = None;
    loop {
        let event = std::future::poll_fn(|cx| {
            if let Poll::Ready(ended) = conn.as_mut().poll(cx) {
                return Poll::Ready(Event::Ended(ended));
            }
            if hard.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::Hard);
            }
            if !graceful_sent && graceful.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::Graceful);
            }
            // Checked after hyper has read what arrived, so a request whose head is in
            // withdraws the shed instead of being cut.
            if activity.poll_shed(cx).is_ready() {
                return Poll::Ready(Event::Shed);
            }
            // Once closing, the idle timer has done its part; only the head's and the close's
            // deadlines remain.
            let next = activity
                .next(limits.header_read_timeout, limits.idle_timeout)
                .filter(|(_, due)| close_by.is_none() || *due != Due::Idle);
            let (deadline, due) = match (next, close_by) {
                (Some((at, due)), Some(by)) if at < by => (at, Some(due)),
                (_, Some(by)) => (by, None),
                (Some((at, due)), None) => (at, Some(due)),
                (None, None) => (far, None),
            };
            if timer.deadline() != deadline {
                timer.as_mut().reset(deadline);
            }
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(match due {
                    Some(due) => Event::Timer(due),
                    None => Event::CloseBy,
                });
            }
            Poll::Pending
        })
        .await;
        match event {
            Event::Ended(Ok(())) => return,
            Event::Ended(Err(error)) => {
                tracing::debug!(%error, "connection ended with an error");
                return;
            }
            Event::Hard => {
                tracing::debug!("server stop deadline passed: closing the connection");
                return;
            }
            Event::CloseBy => {
                tracing::debug!("connection did not close in time: closing it");
                return;
            }
            Event::Shed => {
                // Idle, so nothing is cut: no request in flight and every answer with the
                // kernel. Dropping hyper's connection closes the socket at once, where a
                // graceful shutdown would wait out a partly sent head.
                if registered.settle_shed() {
                    tracing::debug!("idle longest at the connection cap: shed for a new client");
                    return;
                }
            }
            Event::Timer(Due::Header) => {
                tracing::debug!("request head not read in time: closing the connection");
                return;
            }
            Event::Timer(Due::Idle) | Event::Graceful => {
                if matches!(event, Event::Graceful) {
                    graceful_sent = true;
                } else {
                    tracing::debug!("connection idle too long: closing it");
                }
                graceful_shutdown(conn.as_mut());
                close_by.get_or_insert(Instant::now() + limits.header_read_timeout);
            }
        }
    }
}
