//! Listening on TCP with the system's largest listen backlog, as Go's `net/http` does.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// The listen backlog asked for when the system's maximum cannot be read: Linux's default
/// `net.core.somaxconn` since 5.4. Kernels cap a backlog at their maximum, so asking for more
/// than a system allows still gets that system's maximum.
pub const FALLBACK_BACKLOG: u32 = 4096;

/// The system's largest listen backlog, which every server listens with unless
/// [`Options::listen_backlog`](crate::Options::listen_backlog) says otherwise.
///
/// On Linux it is `/proc/sys/net/core/somaxconn`, read as Go's `net` package reads it for
/// every listener; elsewhere, or when that file cannot be read or holds no positive number,
/// [`FALLBACK_BACKLOG`].
///
/// The backlog is how many connections the kernel completes and queues before the server
/// accepts them. tokio's `TcpListener::bind` asks for mio's fixed 128: a burst of a few
/// hundred connections then overflows the queue, and the kernel drops the SYN of the next
/// client, a kubelet probe say, which retries only after its 1 s retransmission timeout,
/// the kubelet's whole default probe timeout.
pub fn system_backlog() -> u32 {
    #[cfg(target_os = "linux")]
    if let Some(somaxconn) = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|&somaxconn| somaxconn > 0)
    {
        return somaxconn;
    }
    FALLBACK_BACKLOG
}

/// A listener on `addr` with `backlog`; `SO_REUSEADDR` set on Unix (as Go and mio set it), so
/// a restarted server can listen again while connections of the old one are in `TIME_WAIT`.
/// Needs a tokio runtime (the listener registers with its reactor).
pub(crate) fn listen(addr: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the system allows, read here independently of [`system_backlog`].
    #[cfg(target_os = "linux")]
    #[test]
    fn the_system_backlog_is_somaxconn() {
        let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(system_backlog(), somaxconn);
    }

    #[tokio::test]
    async fn listens_on_v4_and_v6_loopback() {
        let v4 = listen("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        let addr = v4.local_addr().unwrap();
        assert!(addr.ip().is_loopback() && addr.port() != 0);
        let client = tokio::net::TcpStream::connect(addr);
        let (accepted, connected) = tokio::join!(v4.accept(), client);
        assert_eq!(
            accepted.unwrap().1,
            connected.unwrap().local_addr().unwrap()
        );
        // A host without IPv6 cannot bind [::1]: that is the system's answer, not a fault.
        if let Ok(v6) = listen("[::1]:0".parse().unwrap(), 16) {
            assert!(v6.local_addr().unwrap().is_ipv6());
        }
    }

    #[tokio::test]
    async fn an_address_in_use_is_refused() {
        let first = listen("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        let taken = first.local_addr().unwrap();
        let error = listen(taken, 16).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AddrInUse);
    }
}
