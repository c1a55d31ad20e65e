//! A plain HTTP GET for what a test reads from a server of its own on loopback (a manager's
//! `/healthz`, `/readyz` and `/metrics`): HTTP/1.0, so the server answers and closes, read
//! to the end, with no client library between the test and the bytes on the wire.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A whole answer to [`get`]: its status, its head (status line and headers) and its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The status code, `200` for `HTTP/1.1 200 OK`.
    pub status: u16,
    /// The status line and the headers, up to the blank line (not included).
    pub head: String,
    /// Everything after the blank line, as text (invalid UTF-8 replaced).
    pub body: String,
}

impl Response {
    /// The value of the first header named `name` (in any case), trimmed.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }
}

/// `GET path` over HTTP/1.0 on a new connection to `addr`, read until the server closes it.
///
/// It sets no timeout: wrap it in `tokio::time::timeout` where a server may not answer.
///
/// # Errors
///
/// The I/O error when the connection, the write or the read fails, and
/// [`io::ErrorKind::InvalidData`] when what came back is not an HTTP answer.
///
/// ```no_run
/// # async fn demo(addr: std::net::SocketAddr) -> std::io::Result<()> {
/// let ready = rudder_envtest::http::get(addr, "/readyz").await?;
/// assert_eq!((ready.status, ready.body.as_str()), (200, "ok"));
/// # Ok(())
/// # }
/// ```
pub async fn get(addr: SocketAddr, path: &str) -> io::Result<Response> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    parse(&String::from_utf8_lossy(&answer))
}

/// An HTTP answer from its text.
fn parse(answer: &str) -> io::Result<Response> {
    let invalid = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{why}: {:?}", answer.get(..80).unwrap_or(answer)),
        )
    };
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| invalid("an answer without the blank line that ends its head"))?;
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/")
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| invalid("an answer without an HTTP status line"))?;
    Ok(Response {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn parses_status_headers_and_body() {
        let answer = parse(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n\r\nnot ready\n",
        )
        .unwrap();
        assert_eq!(answer.status, 503);
        assert_eq!(answer.header("content-type"), Some("text/plain"));
        assert_eq!(answer.header("content-length"), None);
        assert_eq!(answer.body, "not ready\n");
    }

    #[test]
    fn what_is_no_http_answer_is_invalid_data() {
        for answer in [
            "",
            "HTTP/1.1 200 OK\r\n",
            "SSH-2.0\r\n\r\n",
            "HTTP/1.1 x\r\n\r\n",
        ] {
            let error = parse(answer).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{answer:?}");
        }
    }

    #[tokio::test]
    async fn gets_from_a_server_that_answers_and_closes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut chunk = [0; 256];
            while !request.ends_with(b"\r\n\r\n") {
                let n = stream.read(&mut chunk).await.unwrap();
                assert_ne!(n, 0, "the client closed before the end of its request");
                request.extend_from_slice(&chunk[..n]);
            }
            stream
                .write_all(b"HTTP/1.0 200 OK\r\nX-Seen: yes\r\n\r\nok")
                .await
                .unwrap();
            String::from_utf8_lossy(&request).into_owned()
        });
        let answer = get(addr, "/readyz").await.unwrap();
        assert_eq!((answer.status, answer.body.as_str()), (200, "ok"));
        assert_eq!(answer.header("x-seen"), Some("yes"));
        let request = server.await.unwrap();
        assert!(request.starts_with("GET /readyz HTTP/1.0\r\n"), "{request}");
    }

    #[tokio::test]
    async fn nothing_listening_is_an_error() {
        let port = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = port.local_addr().unwrap();
        drop(port);
        assert!(get(addr, "/").await.is_err());
    }
}
