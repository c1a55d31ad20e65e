//! A bare HTTP/1.1 GET for the profiling tests (no client library: the answer's status and
//! body as the server sent them).

use std::net::SocketAddr;

/// GETs `path` from the server at `addr`: the status and the body.
pub(crate) async fn get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
    request(addr, "GET", path).await
}

/// POSTs nothing to `path` on the server at `addr`: the status.
#[allow(dead_code, reason = "not every test binary that includes this posts")]
pub(crate) async fn post(addr: SocketAddr, path: &str) -> u16 {
    request(addr, "POST", path).await.0
}

/// Sends `method` `path` to the server at `addr`: the status and the body.
async fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = answer[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, body)
}

/// The body of a chunked answer.
fn dechunk(mut bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = bytes.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&bytes[..line]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&bytes[line + 2..line + 2 + size]);
        bytes = &bytes[line + 2 + size + 2..];
    }
}
