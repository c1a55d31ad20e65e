//! [`CertificateStore`]: the serving certificate, swappable at any time and read by every
//! TLS handshake; and parsing a PEM pair into one.

use std::fmt;
use std::sync::{Arc, RwLock};

use rudder_core::sync::RwLockExt;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Why a certificate and key could not be turned into a serving certificate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertificateError {
    /// The certificate PEM holds no `CERTIFICATE` block, or one that does not parse.
    #[error("no certificate in the PEM data")]
    NoCertificate,
    /// A certificate block did not parse as PEM.
    #[error("cannot parse the certificate PEM")]
    CertificatePem(#[source] rustls::pki_types::pem::Error),
    /// The key PEM holds no private key, or one that does not parse.
    #[error("cannot parse the private key PEM")]
    KeyPem(#[source] rustls::pki_types::pem::Error),
    /// The private key is of a kind `ring` cannot sign with.
    #[error("unsupported private key")]
    UnsupportedKey(#[source] rustls::Error),
    /// The private key does not belong to the certificate.
    #[error("the private key does not match the certificate")]
    Mismatch(#[source] rustls::Error),
}

/// The serving certificate: a cheap, cloneable handle whose certificate can be swapped at
/// any time; every TLS handshake reads the current one.
///
/// The file source fills one from `tls.crt`/`tls.key` and swaps in each valid new pair. Any
/// other source (a certificate generated at start and kept in a Secret, rotated before it
/// expires) plugs in the same way: build the server with
/// [`Options::certificate_store`](crate::Options::certificate_store) and call
/// [`set`](Self::set) or [`set_pem`](Self::set_pem) whenever the certificate changes.
#[derive(Clone, Default)]
pub struct CertificateStore {
    current: Arc<RwLock<Option<Arc<CertifiedKey>>>>,
}

impl fmt::Debug for CertificateStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateStore")
            .field("loaded", &self.current().is_some())
            .finish()
    }
}

impl CertificateStore {
    /// An empty store: handshakes fail until a certificate is set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store holding `key`.
    pub fn with_certificate(key: Arc<CertifiedKey>) -> Self {
        let store = Self::new();
        store.set(key);
        store
    }

    /// Serves `key` from the next handshake on. Connections already open keep theirs.
    pub fn set(&self, key: Arc<CertifiedKey>) {
        *self.current.write_unpoisoned() = Some(key);
    }

    /// Removes the certificate: handshakes fail (and readiness with them) until one is set
    /// again. For a source that must stop serving a certificate it no longer trusts.
    pub fn clear(&self) {
        *self.current.write_unpoisoned() = None;
    }

    /// Parses a PEM certificate chain and PEM private key, checks that they belong
    /// together, and serves them from the next handshake on. On error the store keeps what
    /// it had.
    pub fn set_pem(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), CertificateError> {
        let key = parse_pem_pair(cert_pem, key_pem)?;
        self.set(Arc::new(key));
        Ok(())
    }

    /// The certificate served now, if any.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.current.read_unpoisoned().clone()
    }

    /// The current end-entity certificate, DER-encoded.
    pub fn end_entity(&self) -> Option<CertificateDer<'static>> {
        let key = self.current()?;
        key.cert.first().cloned()
    }
}

impl ResolvesServerCert for CertificateStore {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

/// Parses a PEM certificate chain and a PEM private key into a serving certificate, with
/// the `ring` provider, and checks that the key belongs to the certificate.
pub fn parse_pem_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, CertificateError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(CertificateError::CertificatePem)?;
    if chain.is_empty() {
        return Err(CertificateError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(CertificateError::KeyPem)?;
    let provider = provider();
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(CertificateError::UnsupportedKey)?;
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        // A key that cannot tell its public half cannot be checked here; the handshake
        // still fails for a client if it does not match.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(error) => Err(CertificateError::Mismatch(error)),
    }
}

/// The crypto provider used everywhere in this crate: `ring` (no aws-lc build needed).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
