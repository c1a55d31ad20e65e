//! [`Options`]: where the webhook server listens, where its certificate comes from, and the
//! limits it holds clients to.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::certificate::CertificateStore;

/// The default bind address: every interface, port 9443 (controller-runtime's).
pub const DEFAULT_BIND_ADDRESS: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 9443);

/// The default certificate directory (controller-runtime's), where a Secret volume is
/// usually mounted.
pub const DEFAULT_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

/// The default certificate file name in the certificate directory.
pub const DEFAULT_CERT_NAME: &str = "tls.crt";

/// The default private key file name in the certificate directory.
pub const DEFAULT_KEY_NAME: &str = "tls.key";

/// How often the certificate files are read again by default (controller-runtime's
/// certwatcher polls every 10 s too). Secret volumes change by a symlink swap, which a
/// watch on the files themselves can miss; polling always sees it.
pub const DEFAULT_CERT_POLL_PERIOD: Duration = Duration::from_secs(10);

/// The default request body limit: 7 MiB (controller-runtime's). The API server sends
/// objects of up to about 3 MiB, and a review of an update carries two of them.
pub const DEFAULT_MAX_BODY_SIZE: u64 = 7 * 1024 * 1024;

/// Where the server's certificate comes from.
#[derive(Clone, Debug)]
pub enum CertificateSource {
    /// A PEM certificate chain and a PEM private key in a directory, read at start and
    /// polled for changes (see [`Options::cert_poll_period`]).
    Files {
        /// The directory.
        dir: PathBuf,
        /// The certificate chain's file name in `dir`.
        cert_name: String,
        /// The private key's file name in `dir`.
        key_name: String,
    },
    /// A [`CertificateStore`] that someone else fills and rotates (a certificate generated
    /// and kept in a Secret, say). It must hold a certificate when the server starts.
    Store(CertificateStore),
}

impl CertificateSource {
    /// The certificate and key paths, for a file source.
    pub fn paths(&self) -> Option<(PathBuf, PathBuf)> {
        match self {
            Self::Files {
                dir,
                cert_name,
                key_name,
            } => Some((dir.join(cert_name), dir.join(key_name))),
            Self::Store(_) => None,
        }
    }
}

/// How the webhook server is set up. Every field has a default; set the ones to change with
/// the builder methods.
#[derive(Clone, Debug)]
pub struct Options {
    pub(crate) bind_address: SocketAddr,
    pub(crate) certificate: CertificateSource,
    pub(crate) cert_poll_period: Duration,
    pub(crate) max_body_size: u64,
    pub(crate) server: rudder_server::Options,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            bind_address: DEFAULT_BIND_ADDRESS,
            certificate: CertificateSource::Files {
                dir: PathBuf::from(DEFAULT_CERT_DIR),
                cert_name: DEFAULT_CERT_NAME.to_owned(),
                key_name: DEFAULT_KEY_NAME.to_owned(),
            },
            cert_poll_period: DEFAULT_CERT_POLL_PERIOD,
            max_body_size: DEFAULT_MAX_BODY_SIZE,
            server: rudder_server::Options::default(),
        }
    }
}

impl Options {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Where to listen (default [`DEFAULT_BIND_ADDRESS`]; port 0 picks a free port).
    pub fn bind_address(mut self, addr: SocketAddr) -> Self {
        self.bind_address = addr;
        self
    }

    /// The port to listen on, on the address already set (default 9443).
    pub fn port(mut self, port: u16) -> Self {
        self.bind_address.set_port(port);
        self
    }

    /// Read `tls.crt` and `tls.key` (or the names set with [`cert_name`](Self::cert_name)
    /// and [`key_name`](Self::key_name)) from `dir` (default [`DEFAULT_CERT_DIR`]). Replaces
    /// a store set with [`certificate_store`](Self::certificate_store).
    pub fn cert_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        self.certificate = match self.certificate {
            CertificateSource::Files {
                cert_name,
                key_name,
                ..
            } => CertificateSource::Files {
                dir,
                cert_name,
                key_name,
            },
            CertificateSource::Store(_) => CertificateSource::Files {
                dir,
                cert_name: DEFAULT_CERT_NAME.to_owned(),
                key_name: DEFAULT_KEY_NAME.to_owned(),
            },
        };
        self
    }

    /// The certificate chain's file name in the certificate directory (default
    /// [`DEFAULT_CERT_NAME`]). Has no effect with a certificate store.
    pub fn cert_name(mut self, name: impl Into<String>) -> Self {
        if let CertificateSource::Files { cert_name, .. } = &mut self.certificate {
            *cert_name = name.into();
        }
        self
    }

    /// The private key's file name in the certificate directory (default
    /// [`DEFAULT_KEY_NAME`]). Has no effect with a certificate store.
    pub fn key_name(mut self, name: impl Into<String>) -> Self {
        if let CertificateSource::Files { key_name, .. } = &mut self.certificate {
            *key_name = name.into();
        }
        self
    }

    /// Serve the certificate `store` holds, whenever it changes, instead of reading files.
    pub fn certificate_store(mut self, store: CertificateStore) -> Self {
        self.certificate = CertificateSource::Store(store);
        self
    }

    /// How often the certificate files are read again (default
    /// [`DEFAULT_CERT_POLL_PERIOD`]; at least 10 ms).
    pub fn cert_poll_period(mut self, period: Duration) -> Self {
        self.cert_poll_period = period.max(Duration::from_millis(10));
        self
    }

    /// The largest request body served, in bytes (default [`DEFAULT_MAX_BODY_SIZE`]); larger
    /// ones are answered `413 Payload Too Large`.
    pub fn max_body_size(mut self, max: u64) -> Self {
        self.max_body_size = max;
        self
    }

    /// How long a client has to send a complete request head (default
    /// [`rudder_server::DEFAULT_HEADER_READ_TIMEOUT`]).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.server = self.server.header_read_timeout(timeout);
        self
    }

    /// How long a client has, once a request's head is in, to send the whole review (default
    /// [`rudder_server::DEFAULT_BODY_READ_TIMEOUT`], the API server's longest call); a
    /// slower one is answered `408`.
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.server = self.server.body_read_timeout(timeout);
        self
    }

    /// How long a keep-alive connection may wait with no request (default
    /// [`rudder_server::DEFAULT_IDLE_TIMEOUT`]).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.server = self.server.idle_timeout(timeout);
        self
    }

    /// How long a TLS handshake may take (default
    /// [`rudder_server::DEFAULT_HANDSHAKE_TIMEOUT`]).
    pub fn tls_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.server = self.server.handshake_timeout(timeout);
        self
    }

    /// How many connections may be open at once (default
    /// [`rudder_server::DEFAULT_MAX_CONNECTIONS`]); at the cap a new client takes the slot
    /// of the connection idle longest, never one with a request in flight.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.server = self.server.max_connections(max);
        self
    }

    /// How many connections the kernel may queue before the server accepts them (default:
    /// the system's maximum, [`rudder_server::system_backlog`], as Go's `net/http` listens).
    pub fn listen_backlog(mut self, backlog: u32) -> Self {
        self.server = self.server.listen_backlog(backlog);
        self
    }

    /// Offers HTTP/2 by ALPN and serves it to clients that take it (default off: HTTP/1.1
    /// only, as controller-runtime's webhook server since the HTTP/2 "rapid reset" attack,
    /// CVE-2023-44487). Current API servers (1.33, 1.37) take HTTP/2 when it is offered;
    /// 1.20's asked only for HTTP/1.1. Needs the crate's `http2` feature.
    #[cfg(feature = "http2")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http2")))]
    pub fn http2(mut self, enabled: bool) -> Self {
        self.server = self.server.http2(enabled);
        self
    }

    /// Whether HTTP/2 is offered (always `false` without the `http2` feature).
    pub fn is_http2(&self) -> bool {
        self.server.is_http2()
    }

    /// The certificate source configured.
    pub fn certificate_source(&self) -> &CertificateSource {
        &self.certificate
    }

    /// The bind address configured.
    pub fn address(&self) -> SocketAddr {
        self.bind_address
    }

    pub(crate) fn server_options(&self) -> rudder_server::Options {
        self.server
            .clone()
            .bind_address(self.bind_address)
            .max_body_size(Some(self.max_body_size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_listens_with_the_system_backlog_unless_told() {
        let default = Options::new().server_options();
        assert_eq!(default.backlog(), rudder_server::system_backlog());
        let told = Options::new().listen_backlog(64).server_options();
        assert_eq!(told.backlog(), 64);
    }
}
