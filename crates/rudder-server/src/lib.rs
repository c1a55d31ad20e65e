//! An HTTP server on hyper for any tower service, with every wait bounded: the foundation
//! of Rudder's probe, metrics and webhook servers. It speaks HTTP/1.1, and HTTP/2 too with
//! the `http2` feature, on connections whose acceptor negotiated it (see
//! [Features](#features)).
//!
//! Start with [`Server::bind`] and [`Options`], serve a service with [`Server::serve`], and
//! stop it with [`ServerHandle::stop`] and a deadline.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//!
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use hyper::body::Bytes;
//! use rudder_server::{Body, Options, Server};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let hello = tower::service_fn(|request: Request<Body>| async move {
//!     let text = format!("hello from {}\n", request.uri().path());
//!     Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
//! });
//! let options = Options::new("127.0.0.1:0".parse()?)
//!     .max_connections(64)
//!     .header_read_timeout(Duration::from_secs(5));
//! let server = Server::bind(options).await?;
//! println!("listening on {}", server.local_addr());
//! let handle = server.serve(hello);
//! // ... later: finish requests in flight, for at most two seconds.
//! let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
//! let report = handle.stop(Some(deadline)).await;
//! assert_eq!(report.closed_at_deadline, 0);
//! # Ok(())
//! # }
//! ```
//!
//! # Bounded waits
//!
//! A server is only as available as its worst client lets it be. Every wait a client can
//! cause is bounded by an [`Options`] field:
//!
//! - **Connections**: at most [`Options::max_connections`] are open (see [At the
//!   cap](#at-the-cap) for what a new client then gets).
//! - **Handshake**: an [`Acceptor`]'s handshake (TLS, in a crate above) has
//!   [`Options::handshake_timeout`].
//! - **Request head**: [`Options::header_read_timeout`], from the first byte of a request
//!   (from the accept, for a connection's first request). hyper 1.x's own header timer runs
//!   from the moment a connection waits for a request, idle keep-alive waits included, so it
//!   cannot tell a slow head from an idle connection; this crate times both itself.
//! - **Idle**: a keep-alive connection with no request in flight for
//!   [`Options::idle_timeout`] is closed (hyper 1.x has no such timer). A slow request in
//!   flight is never cut by it.
//! - **Body**: a body past [`Options::max_body_size`] is answered `413`; one not complete
//!   within [`Options::body_read_timeout`] of its request's head (30 s by default, the API
//!   server's longest webhook call) is answered `408`. Both close the connection.
//!
//! # At the cap
//!
//! A server at its connection cap keeps accepting. For each new client it closes the
//! connection idle longest: one with no request in flight and its last answer written out
//! (waiting for its first request's head, in its handshake, or idle between keep-alive
//! requests), the one whose idle spell began first (its accept, or its last answer). Bytes
//! of an unfinished head do not start a new spell, so a client trickling a head cannot keep
//! its connection young. A request in flight is never cut: a connection whose request head
//! has been read, or whose answer the client has not taken yet, is not a candidate, and a
//! request that arrives just as its connection is picked keeps it open (another is picked).
//! Only when every connection has a request in flight does the new client wait (and the
//! server accept nothing more) until one finishes or closes; a client just accepted is
//! held meanwhile, so the server holds at most one descriptor past the cap.
//!
//! So a flood of idle or garbage connections, however many, cannot keep a new client, a
//! kubelet's probe say, from being served at once: it costs the flood one of its
//! connections, the oldest. Go's `net/http` has no cap and serves every client; this keeps
//! its promptness and still bounds the descriptors a flood can take. Without shedding, a
//! client at the cap would wait in the listen backlog until the header timeout closed an
//! idle connection, ten seconds or more, past a kubelet probe's one-second timeout.
//! Shedding is counted ([`ServerHandle::shed_connections`]) and logged at most every ten
//! seconds with the number shed since the last line; each shed is logged at debug level.
//! The choice scans the open connections, once per client accepted at the cap.
//!
//! # Listen backlog
//!
//! Every server listens with the system's largest backlog ([`system_backlog`]: Linux's
//! `net.core.somaxconn`, 4096 by default since Linux 5.4; [`FALLBACK_BACKLOG`] where it
//! cannot be read), as Go's `net/http` does, or with [`Options::listen_backlog`]. That many
//! connections can be completed by the kernel and wait to be accepted, during a burst or
//! while every connection has a request in flight at the cap; past it the kernel drops a
//! client's SYN, and the client retries only after a second. tokio's `TcpListener::bind` would ask for 128, which a burst of a few
//! hundred connections fills: the next kubelet probe then misses its 1 s timeout. `SO_REUSEADDR`
//! is set on Unix, as Go sets it.
//!
//! # Accept errors
//!
//! When `accept` fails (out of file descriptors, most often), the loop waits before trying
//! again, as Go's `net/http` does: 5 ms, doubling to 1 s, reset by the next successful
//! accept; each wait is logged once and counted ([`ServerHandle::accept_errors`]). Without
//! the wait, a process out of descriptors spins on the error. [`raise_fd_limit`] raises the
//! soft descriptor limit to the hard one, as Go's runtime does at start.
//!
//! # Stopping
//!
//! [`ServerHandle::stop`] takes the caller's deadline: it stops accepting, lets requests in
//! flight finish (idle connections close at once), closes what is left at the deadline, and
//! returns once every connection's task has ended. The server keeps no timer of its own for
//! this, so one deadline can be handed down through a whole process's shutdown.
//!
//! # Other streams
//!
//! [`Server::serve_with`] serves on streams an [`Acceptor`] makes of each accepted TCP
//! stream, in the connection's own task; that is where TLS plugs in. [`PlainTcp`] is the
//! identity.
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `http2` | no | HTTP/2 on connections whose acceptor negotiates it (TLS ALPN `h2`), when `Options::http2(true)`; without it the `h2` crate is not compiled |

// Which feature brings an item, in docs.rs' rendering (`--cfg docsrs`, on nightly).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acceptor;
mod activity;
mod body;
mod connection;
mod fd_limit;
mod listener;
mod options;
mod server;
mod service;
mod shedding;

pub use acceptor::{Acceptor, PlainTcp};
pub use body::{Body, BodyError};
pub use fd_limit::{FdLimit, FdLimitError, raise_fd_limit};
pub use listener::{FALLBACK_BACKLOG, system_backlog};
pub use options::{
    DEFAULT_BIND_ADDRESS, DEFAULT_BODY_READ_TIMEOUT, DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_CONNECTIONS, Options,
};
pub use server::{
    ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN, BindError, Server, ServerHandle, StopReport,
};
