//! [`Body`]: a request body that stops at the server's body limit and read timeout.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Frame, SizeHint};
use hyper::body::{Bytes, Incoming};

/// A request's body as a service sees it: hyper's body, cut off at
/// [`Options::max_body_size`](crate::Options::max_body_size).
///
/// A body that goes past the limit yields [`BodyError::TooLarge`]; whatever the service then
/// answers, the client gets `413 Payload Too Large`. (A request whose `Content-Length` is
/// already over the limit is answered 413 without calling the service.) A body not complete
/// within [`Options::body_read_timeout`](crate::Options::body_read_timeout) of the request's
/// head yields [`BodyError::TimedOut`], and the client gets `408 Request Timeout`.
#[derive(Debug)]
pub struct Body {
    inner: Incoming,
    remaining: Option<u64>,
    limit: u64,
    exceeded: Arc<AtomicBool>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    timed_out: Arc<AtomicBool>,
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// The body is larger than the server's limit; the client is answered 413 whatever the
    /// service returns. Retrying does not help.
    #[error("request body larger than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The connection failed while the body was read (the client went away, or sent a
    /// malformed chunk).
    #[error("cannot read the request body")]
    Read(#[source] hyper::Error),
    /// The client did not send the whole body within the server's body read timeout; it is
    /// answered 408 whatever the service returns. Retrying helps only a client that sends
    /// faster.
    #[error("request body not received within {timeout:?}")]
    TimedOut {
        /// The server's body read timeout.
        timeout: Duration,
    },
}

impl Body {
    pub(crate) fn new(
        inner: Incoming,
        limit: Option<u64>,
        exceeded: Arc<AtomicBool>,
        timeout: Duration,
        timed_out: Arc<AtomicBool>,
    ) -> Self {
        Self {
            inner,
            remaining: limit,
            limit: limit.unwrap_or(u64::MAX),
            exceeded,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            timed_out,
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if this.exceeded.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(BodyError::TooLarge { limit: this.limit })));
        }
        if this.timed_out.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(BodyError::TimedOut {
                timeout: this.timeout,
            })));
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(BodyError::Read(error)))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {
                // Waiting for the client: bounded by the read timeout, whose timer wakes this
                // task when it fires.
                if this.deadline.as_mut().poll(cx).is_ready() {
                    this.timed_out.store(true, Ordering::Relaxed);
                    return Poll::Ready(Some(Err(BodyError::TimedOut {
                        timeout: this.timeout,
                    })));
                }
                return Poll::Pending;
            }
        };
        if let (Some(remaining), Some(data)) = (this.remaining.as_mut(), frame.data_ref()) {
            let len = data.len() as u64;
            if len > *remaining {
                this.exceeded.store(true, Ordering::Relaxed);
                return Poll::Ready(Some(Err(BodyError::TooLarge { limit: this.limit })));
            }
            *remaining -= len;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
