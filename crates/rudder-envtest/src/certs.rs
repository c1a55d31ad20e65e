//! Key material for one control plane (a CA, the API server's serving certificate and the
//! service-account signing key) and for webhook servers (a CA and a serving certificate), all
//! generated in memory with rcgen.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// PEM text of everything the API server and its clients need.
pub(crate) struct Certs {
    /// The CA that signed the serving certificate; clients trust it.
    pub(crate) ca_cert: String,
    /// The serving certificate, valid for `127.0.0.1` and `localhost`.
    pub(crate) serving_cert: String,
    /// The serving certificate's private key (PKCS#8).
    pub(crate) serving_key: String,
    /// The service-account token signing key (PKCS#8).
    pub(crate) sa_key: String,
    /// The public half of `sa_key` (SubjectPublicKeyInfo).
    pub(crate) sa_pub: String,
}

impl Certs {
    /// Generates fresh keys and certificates. ECDSA P-256 keys keep this to a few milliseconds.
    pub(crate) fn generate() -> Result<Self, rcgen::Error> {
        let serving = ServingPair::generate("rudder-envtest-ca", "kube-apiserver")?;
        let sa_key = KeyPair::generate()?;
        Ok(Self {
            ca_cert: serving.ca_cert,
            serving_cert: serving.cert,
            serving_key: serving.key,
            sa_pub: sa_key.public_key_pem(),
            sa_key: sa_key.serialize_pem(),
        })
    }
}

/// A fresh CA and a serving certificate it signed, valid for `127.0.0.1` and `localhost`.
pub(crate) struct ServingPair {
    /// The CA, PEM; clients trust it.
    pub(crate) ca_cert: String,
    /// The serving certificate, PEM.
    pub(crate) cert: String,
    /// The serving certificate's private key, PEM (PKCS#8).
    pub(crate) key: String,
    /// The CA's name and private key (PEM), to issue more serving pairs from it.
    ca_name: String,
    ca_key: String,
}

impl ServingPair {
    /// Generates a CA named `ca_name` and a certificate named `server_name` signed by it.
    pub(crate) fn generate(ca_name: &str, server_name: &str) -> Result<Self, rcgen::Error> {
        let ca_key = KeyPair::generate()?;
        let ca_params = ca_params(ca_name)?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca_key_pem = ca_key.serialize_pem();
        let issuer = Issuer::new(ca_params, ca_key);
        let (cert, key) = serving_pair(&issuer, server_name)?;
        Ok(Self {
            ca_cert: ca_cert.pem(),
            cert,
            key,
            ca_name: ca_name.to_owned(),
            ca_key: ca_key_pem,
        })
    }

    /// Another serving certificate and key (PEM) for `server_name`, signed by the same CA.
    pub(crate) fn reissue(&self, server_name: &str) -> Result<(String, String), rcgen::Error> {
        let ca_key = KeyPair::from_pem(&self.ca_key)?;
        let issuer = Issuer::new(ca_params(&self.ca_name)?, ca_key);
        serving_pair(&issuer, server_name)
    }
}

/// The parameters of a CA named `name`; the same name gives the same subject, so a
/// certificate issued later chains to the CA certificate made first.
fn ca_params(name: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

/// A serving certificate for `127.0.0.1` and `localhost` named `server_name`, signed by
/// `issuer`: (certificate, key), PEM.
fn serving_pair(
    issuer: &Issuer<'_, KeyPair>,
    server_name: &str,
) -> Result<(String, String), rcgen::Error> {
    {
        let key = KeyPair::generate()?;
        // rcgen turns a name that parses as an IP address into an IP SAN, which Go's TLS
        // client needs to accept the certificate for https://127.0.0.1.
        let mut serving =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        serving
            .distinguished_name
            .push(DnType::CommonName, server_name);
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let cert = serving.signed_by(&key, issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn generates_pem_blocks_of_the_expected_kinds() {
        let certs = Certs::generate().unwrap();
        assert!(certs.ca_cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(
            certs
                .serving_cert
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        assert!(certs.serving_key.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(certs.sa_key.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(certs.sa_pub.starts_with("-----BEGIN PUBLIC KEY-----"));
        assert_ne!(certs.serving_key, certs.sa_key);
    }
}
