//! [`Acceptor`]: turns an accepted TCP stream into the stream HTTP is served on (plain TCP
//! here; TLS in a crate above).

use std::convert::Infallible;
use std::future::Future;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Turns an accepted TCP stream into the stream HTTP is served on.
///
/// The server calls [`accept`](Acceptor::accept) in the connection's own task, bounded by
/// [`Options::handshake_timeout`](crate::Options::handshake_timeout), so a slow handshake
/// holds one connection slot and never the accept loop. A TLS crate implements this with its
/// handshake; [`PlainTcp`] serves the TCP stream as it is.
pub trait Acceptor: Clone + Send + Sync + 'static {
    /// The stream HTTP is served on.
    type Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static;
    /// Why a handshake failed; logged at debug level, and the connection closed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Performs the handshake on `stream`.
    fn accept(
        &self,
        stream: TcpStream,
    ) -> impl Future<Output = Result<Self::Stream, Self::Error>> + Send;

    /// Whether the handshake on `stream` agreed on HTTP/2 (TLS's ALPN `h2`). The server
    /// speaks HTTP/2 on such a stream when its options allow it (`Options::http2`, with
    /// the `http2` feature), HTTP/1.1 otherwise. The default says no.
    fn negotiated_http2(stream: &Self::Stream) -> bool {
        let _ = stream;
        false
    }
}

/// Serves HTTP on the TCP stream itself, with no handshake.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainTcp;

impl Acceptor for PlainTcp {
    type Stream = TcpStream;
    type Error = Infallible;

    async fn accept(&self, stream: TcpStream) -> Result<TcpStream, Infallible> {
        Ok(stream)
    }
}
