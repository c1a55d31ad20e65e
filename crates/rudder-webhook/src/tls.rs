//! TLS: the acceptor that plugs rustls into rudder-server, and the readiness probe that
//! completes a handshake with the server itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::certificate::{CertificateStore, provider};

/// The [`rudder_server::Acceptor`] for HTTPS: a rustls handshake (the `ring` provider,
/// TLS 1.2 and 1.3, HTTP/1.1 by ALPN, or HTTP/2 as well from `with_http2` with the `http2`
/// feature) that serves the certificate the store holds at the time of each handshake, so
/// a rotated certificate is served without a restart.
///
/// The webhook server uses it; any other rudder-server service (the manager's secure
/// metrics server) can serve HTTPS with it too:
/// `server.serve_with(Tls::new(&store)?, service)`. A handshake fails while the store is
/// empty.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

impl Tls {
    /// An acceptor serving `store`'s current certificate. Fails only if rustls rejects the
    /// protocol versions for the provider, which does not happen with `ring`.
    pub fn new(store: &CertificateStore) -> Result<Self, rustls::Error> {
        Self::offering(store, false)
    }

    /// [`new`](Self::new), offering HTTP/2 (`h2`) before HTTP/1.1: for a server whose
    /// options serve HTTP/2 (`rudder_server::Options::http2`).
    #[cfg(feature = "http2")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http2")))]
    pub fn with_http2(store: &CertificateStore) -> Result<Self, rustls::Error> {
        Self::offering(store, true)
    }

    /// The acceptor for a server that serves HTTP/2 where negotiated (`http2`) or not.
    pub(crate) fn offering(store: &CertificateStore, http2: bool) -> Result<Self, rustls::Error> {
        let alpn = if http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(store.clone()));
        config.alpn_protocols = alpn;
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

impl rudder_server::Acceptor for Tls {
    type Stream = TlsStream<TcpStream>;
    type Error = std::io::Error;

    async fn accept(&self, stream: TcpStream) -> Result<Self::Stream, Self::Error> {
        self.acceptor.accept(stream).await
    }

    fn negotiated_http2(stream: &Self::Stream) -> bool {
        stream.get_ref().1.alpn_protocol() == Some(b"h2")
    }
}

/// Connects to `addr` (the unspecified address becomes loopback) and completes a TLS
/// handshake, accepting only the certificate `store` serves now.
pub(crate) async fn handshake_with_self(
    addr: SocketAddr,
    store: &CertificateStore,
    timeout: Duration,
) -> Result<(), String> {
    let expected = store
        .end_entity()
        .ok_or_else(|| "no serving certificate loaded".to_owned())?;
    let provider = provider();
    let verifier = OwnCertificate {
        expected,
        store: store.clone(),
        provider: Arc::clone(&provider),
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("tls client configuration: {error}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    let target = SocketAddr::new(loopback_for(addr.ip()), addr.port());
    let connect = async {
        let tcp = TcpStream::connect(target)
            .await
            .map_err(|error| format!("cannot connect to {target}: {error}"))?;
        TlsConnector::from(Arc::new(config))
            .connect(ServerName::IpAddress(target.ip().into()), tcp)
            .await
            .map_err(|error| format!("tls handshake with {target} failed: {error}"))?;
        Ok(())
    };
    tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| format!("tls handshake with {target} timed out after {timeout:?}"))?
}

fn loopback_for(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        other => other,
    }
}

/// Trusts exactly the server's own current certificate (whatever CA signed it), and checks
/// the handshake's signatures against it: the probe shows that the server holds the key of
/// the certificate loaded, without depending on a CA bundle.
#[derive(Debug)]
struct OwnCertificate {
    expected: CertificateDer<'static>,
    store: CertificateStore,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for OwnCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The store may have rotated between the probe's start and the handshake; either
        // certificate is the server's own.
        let current = self.store.end_entity();
        if end_entity.as_ref() == self.expected.as_ref()
            || current.is_some_and(|current| current.as_ref() == end_entity.as_ref())
        {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "the server presented a certificate other than the one loaded".to_owned(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
