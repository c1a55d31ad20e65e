//! Loopback ports for servers a test starts and restarts: chosen below the kernel's
//! ephemeral range, so no outgoing connection is given one while its server is down.
//!
//! A port found by binding port 0 comes from the ephemeral range (Linux: 32768-60999), the
//! same range the kernel draws the local port of every outgoing connection from. Once the
//! finding listener closes, a connection the API server, etcd or the test itself opens may
//! be given that port as its own, and a server binding it then fails with
//! `Address already in use` (`SO_REUSEADDR` does not help against a live connection). A
//! test that chooses a port, writes it into a webhook configuration and starts its
//! operator several times on it met exactly that.

use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use rudder_core::sync::LockExt;

use crate::error::{Error, Result};

/// Where the kernel's ephemeral range starts when it cannot be read: Linux's default.
const EPHEMERAL_START: u16 = 32768;

/// The lowest port handed out.
const LOWEST: u16 = 10_000;

/// The file that holds the kernel's ephemeral range.
const PORT_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// A loopback port that was free a moment ago, outside the kernel's ephemeral range, and
/// that nothing else in this process (no control plane, no webhook install, no earlier
/// call) has been given.
///
/// A server may bind it, stop and bind it again: the kernel never gives a port outside its
/// ephemeral range to an outgoing connection, so only an explicit bind elsewhere can take
/// it. That is what a test needs when the port must be known before the server starts (a
/// webhook configuration, a CRD's conversion webhook pointing at it) or when the server is
/// restarted on it.
///
/// ```
/// let port = rudder_envtest::free_port().unwrap();
/// let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
/// drop(listener);
/// // Bound again after a stop: nothing outgoing took it in between.
/// std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
/// ```
///
/// # Errors
///
/// [`Error::Io`] when no port between 10000 and the start of the ephemeral range can be
/// bound on `127.0.0.1`.
pub fn free_port() -> Result<u16> {
    let [port] = free_ports()?;
    Ok(port)
}

/// `N` distinct ports, as [`free_port`] finds them.
pub(crate) fn free_ports<const N: usize>() -> Result<[u16; N]> {
    static HANDED_OUT: OnceLock<Mutex<Vec<u16>>> = OnceLock::new();
    let mut handed = HANDED_OUT.get_or_init(Default::default).lock_unpoisoned();
    let end = ephemeral_start().max(LOWEST + 1);
    let span = u32::from(end - LOWEST);
    // A start that differs between processes (test binaries, CI jobs), so that two of them
    // looking at once rarely try the same ports.
    let first = seed() % span;
    let mut ports = [0; N];
    let mut found = 0;
    let mut last_error = None;
    for offset in 0..span {
        #[allow(clippy::cast_possible_truncation)] // below `end`, a u16
        let port = LOWEST + ((first + offset) % span) as u16;
        if handed.contains(&port) {
            continue;
        }
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(_) => {
                handed.push(port);
                ports[found] = port;
                found += 1;
                if found == N {
                    return Ok(ports);
                }
            }
            Err(error) => last_error = Some(error),
        }
    }
    Err(Error::Io {
        action: "find a free port below the ephemeral range on",
        path: PathBuf::from("127.0.0.1"),
        source: last_error.unwrap_or_else(|| std::io::Error::other("every port was handed out")),
    })
}

/// The first port of the kernel's ephemeral range.
fn ephemeral_start() -> u16 {
    fs::read_to_string(PORT_RANGE)
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(EPHEMERAL_START)
}

/// The process id mixed with the clock.
fn seed() -> u32 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::process::id().wrapping_mul(2_654_435_761) ^ nanos
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ports_are_distinct_across_calls() {
        let a: [u16; 3] = free_ports().unwrap();
        let b: [u16; 3] = free_ports().unwrap();
        let mut all = a.to_vec();
        all.extend(b);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 6);
    }

    #[test]
    fn ports_are_below_the_ephemeral_range() {
        let start = ephemeral_start();
        for port in free_ports::<8>().unwrap() {
            assert!((LOWEST..start).contains(&port), "{port} not below {start}");
        }
    }
}
