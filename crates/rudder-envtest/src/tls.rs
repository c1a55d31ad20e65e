//! TLS clients for a test's calls to an HTTPS server of its own (a webhook server, secure
//! metrics): rustls with `ring`, trusting exactly the CAs the test gives and nothing from the
//! system, so a handshake proves the server presents a certificate that chains to them.

use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::error::{Error, Result};

/// A client configuration trusting only `cas` (DER), with rustls' safe default protocol
/// versions; wrap it in a `tokio_rustls::TlsConnector` to connect.
///
/// # Errors
///
/// [`Error::TlsClient`] if a certificate is not a usable trust anchor or `cas` is empty.
///
/// ```
/// # fn demo(ca: rustls::pki_types::CertificateDer<'static>) -> rudder_envtest::Result<()> {
/// let config = rudder_envtest::tls::client_config([ca])?;
/// assert!(config.alpn_protocols.is_empty());
/// # Ok(())
/// # }
/// ```
pub fn client_config(
    cas: impl IntoIterator<Item = CertificateDer<'static>>,
) -> Result<Arc<ClientConfig>> {
    let fail = |reason: String| Error::TlsClient { reason };
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots
            .add(ca)
            .map_err(|e| fail(format!("a CA certificate is no trust anchor: {e}")))?;
    }
    if roots.is_empty() {
        return Err(fail("no CA certificate to trust".to_owned()));
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(Arc::new(config))
}

/// [`client_config`] trusting every certificate in `ca_pem` (a CA bundle, as in a
/// `caBundle` or a Secret's `ca.crt`).
///
/// # Errors
///
/// [`Error::TlsClient`] if `ca_pem` holds no certificate or one that does not parse, and as
/// [`client_config`].
///
/// ```
/// # fn demo(hooks: &rudder_envtest::InstalledWebhooks) -> rudder_envtest::Result<()> {
/// let connector = tokio_rustls::TlsConnector::from(rudder_envtest::tls::client_config_pem(
///     hooks.ca_pem(),
/// )?);
/// # Ok(())
/// # }
/// ```
pub fn client_config_pem(ca_pem: &str) -> Result<Arc<ClientConfig>> {
    let cas = CertificateDer::pem_slice_iter(ca_pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::TlsClient {
            reason: format!("the CA bundle does not parse: {e}"),
        })?;
    client_config(cas)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn trusts_the_bundles_certificates_and_refuses_an_empty_one() {
        let pair = crate::certs::ServingPair::generate("test ca", "server").unwrap();
        let bundle = format!("{}{}", pair.ca_cert, pair.ca_cert);
        assert!(client_config_pem(&bundle).is_ok());
        let empty = client_config_pem("").unwrap_err();
        assert!(matches!(empty, Error::TlsClient { .. }), "{empty}");
        let garbage = client_config_pem("-----BEGIN CERTIFICATE-----\n!!\n").unwrap_err();
        assert!(matches!(garbage, Error::TlsClient { .. }), "{garbage}");
    }
}
