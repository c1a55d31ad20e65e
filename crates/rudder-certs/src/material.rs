//! Key material: generating a CA and a serving certificate, reading them from (and writing
//! them to) a Secret's data, and deciding whether they must be renewed.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::ByteString;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

use crate::config::SelfSignedConfig;

/// The serving certificate (PEM), as in a `kubernetes.io/tls` Secret.
pub const TLS_CRT: &str = "tls.crt";
/// The serving certificate's private key (PEM, PKCS#8).
pub const TLS_KEY: &str = "tls.key";
/// Every CA a client should trust (PEM, concatenated): what is injected as `caBundle`.
pub const CA_BUNDLE: &str = "ca.crt";
/// The CA that signs serving certificates (PEM).
pub const CA_SIGNER_CRT: &str = "ca-signer.crt";
/// The signing CA's private key (PEM, PKCS#8).
pub const CA_SIGNER_KEY: &str = "ca-signer.key";
/// During a CA rotation: the next CA (PEM), already in the bundle, not yet signing.
pub const CA_NEXT_CRT: &str = "ca-next.crt";
/// During a CA rotation: the next CA's private key (PEM, PKCS#8).
pub const CA_NEXT_KEY: &str = "ca-next.key";
/// When the CA bundle last changed (Unix seconds, decimal text): a step of a CA rotation
/// waits until the bundle has been published this long.
pub const CA_BUNDLE_SINCE: &str = "ca-bundle-since";

/// How far back a new certificate's `notBefore` is set, so a peer whose clock is a little
/// behind accepts it at once.
const BACKDATE: Duration = Duration::from_secs(300);

/// Why a Secret's data cannot be used as it is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidMaterial {
    /// A key is missing from the Secret.
    #[error("the Secret has no {0}")]
    Missing(&'static str),
    /// A value is not UTF-8 text.
    #[error("{0} is not PEM text")]
    NotText(&'static str),
}

/// The CA and serving certificate kept in the Secret, all PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Material {
    pub(crate) bundle: String,
    pub(crate) signer_cert: String,
    pub(crate) signer_key: String,
    pub(crate) cert: String,
    pub(crate) key: String,
    /// The next CA (certificate, key) while a CA rotation publishes it.
    pub(crate) next: Option<(String, String)>,
    /// When the bundle last changed, Unix seconds.
    pub(crate) bundle_since: Option<u64>,
}

/// What a check of the material decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Nothing to do.
    Keep,
    /// Issue a new serving certificate from the same CA, for this reason.
    Renew(String),
    /// The CA itself cannot be used: generate everything again, for this reason.
    Regenerate(String),
    /// The CA nears its end: generate the next CA and publish it in the bundle beside the
    /// current one (serving certificates stay signed by the current one).
    PublishNextCa,
    /// The next CA has been in the bundle long enough for every client to trust it: sign
    /// with it from now on (a new serving certificate), keeping the old CA in the bundle.
    PromoteNextCa,
    /// The bundle has held the new signing CA alone in use long enough: drop the others.
    DropOldCas,
}

impl Material {
    /// A new CA and a serving certificate for `config`'s names, signed by it.
    pub(crate) fn generate(
        config: &SelfSignedConfig,
        now: SystemTime,
    ) -> Result<Self, rcgen::Error> {
        let (ca_pem, signer_key) = new_ca(config, now)?;
        let (cert, key) = issue(&ca_pem, &signer_key, config, now)?;
        Ok(Self {
            bundle: ca_pem.clone(),
            signer_cert: ca_pem,
            signer_key,
            cert,
            key,
            next: None,
            bundle_since: Some(unix(now)),
        })
    }

    /// What `plan` asked for, done: the material to write.
    pub(crate) fn advance(
        &self,
        plan: &Plan,
        config: &SelfSignedConfig,
        now: SystemTime,
    ) -> Result<Self, rcgen::Error> {
        match plan {
            Plan::Keep => Ok(self.clone()),
            Plan::Renew(_) => self.renew(config, now),
            Plan::Regenerate(_) => Self::generate(config, now),
            Plan::PublishNextCa => {
                let (cert, key) = new_ca(config, now)?;
                // Keep every CA still valid (a signer, an old one not yet dropped), then the
                // next one.
                let mut bundle: Vec<String> = pem_blocks(&self.bundle)
                    .into_iter()
                    .filter(|block| {
                        first_pem(block)
                            .and_then(|pem| {
                                pem.parse_x509().ok().map(|c| seconds_left(&c, now) > 0)
                            })
                            .unwrap_or(false)
                    })
                    .collect();
                bundle.push(cert.clone());
                Ok(Self {
                    bundle: bundle.concat(),
                    next: Some((cert, key)),
                    bundle_since: Some(unix(now)),
                    ..self.clone()
                })
            }
            Plan::PromoteNextCa => {
                let Some((next_cert, next_key)) = &self.next else {
                    return Ok(self.clone());
                };
                let promoted = Self {
                    signer_cert: next_cert.clone(),
                    signer_key: next_key.clone(),
                    next: None,
                    bundle_since: Some(unix(now)),
                    ..self.clone()
                };
                promoted.renew(config, now)
            }
            Plan::DropOldCas => Ok(Self {
                bundle: self.signer_cert.clone(),
                bundle_since: Some(unix(now)),
                ..self.clone()
            }),
        }
    }
}

/// A new self-signed CA: (certificate, key), PEM.
fn new_ca(config: &SelfSignedConfig, now: SystemTime) -> Result<(String, String), rcgen::Error> {
    {
        let ca_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own per CA (as the API server's self-signed CAs, `name@unix-time`),
        // so a client holding several CAs never confuses two.
        params.distinguished_name.push(
            DnType::CommonName,
            format!("{}-ca@{}", config.service(), unix(now)),
        );
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = (now - BACKDATE).into();
        params.not_after = (now + config.ca_validity_value()).into();
        let ca = params.self_signed(&ca_key)?;
        Ok((ca.pem(), ca_key.serialize_pem()))
    }
}

impl Material {
    /// The same CA with a new serving certificate.
    pub(crate) fn renew(
        &self,
        config: &SelfSignedConfig,
        now: SystemTime,
    ) -> Result<Self, rcgen::Error> {
        let (cert, key) = issue(&self.signer_cert, &self.signer_key, config, now)?;
        Ok(Self {
            cert,
            key,
            ..self.clone()
        })
    }

    /// Reads a Secret's data.
    pub(crate) fn from_data(
        data: Option<&BTreeMap<String, ByteString>>,
    ) -> Result<Self, InvalidMaterial> {
        let get = |key: &'static str| -> Result<String, InvalidMaterial> {
            let value = data
                .and_then(|d| d.get(key))
                .ok_or(InvalidMaterial::Missing(key))?;
            String::from_utf8(value.0.clone()).map_err(|_| InvalidMaterial::NotText(key))
        };
        let next = match (get(CA_NEXT_CRT), get(CA_NEXT_KEY)) {
            (Ok(cert), Ok(key)) => Some((cert, key)),
            _ => None,
        };
        Ok(Self {
            bundle: get(CA_BUNDLE)?,
            signer_cert: get(CA_SIGNER_CRT)?,
            signer_key: get(CA_SIGNER_KEY)?,
            cert: get(TLS_CRT)?,
            key: get(TLS_KEY)?,
            next,
            bundle_since: get(CA_BUNDLE_SINCE)
                .ok()
                .and_then(|s| s.trim().parse().ok()),
        })
    }

    /// The Secret's data.
    pub(crate) fn to_data(&self) -> BTreeMap<String, ByteString> {
        let since = self.bundle_since.map(|s| s.to_string());
        [
            (CA_BUNDLE, Some(&self.bundle)),
            (CA_SIGNER_CRT, Some(&self.signer_cert)),
            (CA_SIGNER_KEY, Some(&self.signer_key)),
            (TLS_CRT, Some(&self.cert)),
            (TLS_KEY, Some(&self.key)),
            (CA_NEXT_CRT, self.next.as_ref().map(|(cert, _)| cert)),
            (CA_NEXT_KEY, self.next.as_ref().map(|(_, key)| key)),
            (CA_BUNDLE_SINCE, since.as_ref()),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), ByteString(v?.clone().into_bytes()))))
        .collect()
    }

    /// Whether the material serves `config` at `now`, or what must be done first.
    pub(crate) fn plan(&self, config: &SelfSignedConfig, now: SystemTime) -> Plan {
        let Some(signer_pem) = first_pem(&self.signer_cert) else {
            return Plan::Regenerate("the CA certificate is not PEM".to_owned());
        };
        let Ok(signer) = signer_pem.parse_x509() else {
            return Plan::Regenerate("the CA certificate does not parse".to_owned());
        };
        if !key_matches(&self.signer_key, &signer) {
            return Plan::Regenerate("the CA key does not belong to the CA certificate".to_owned());
        }
        if seconds_left(&signer, now) <= 0 {
            return Plan::Regenerate("the CA expired".to_owned());
        }
        let trusted = pems(&self.bundle)
            .iter()
            .any(|pem| pem.contents == signer_pem.contents);
        if !trusted {
            return Plan::Regenerate("the CA bundle does not hold the signing CA".to_owned());
        }
        let overlap_over = self.bundle_since.is_none_or(|since| {
            unix(now) >= since.saturating_add(config.ca_overlap_value().as_secs())
        });
        let ca_threshold =
            i64::try_from(config.ca_renewal_threshold().as_secs()).unwrap_or(i64::MAX);
        match &self.next {
            Some((next_cert, next_key)) => {
                let usable = first_pem(next_cert).is_some_and(|pem| {
                    pem.parse_x509().is_ok_and(|next| {
                        key_matches(next_key, &next) && seconds_left(&next, now) > 0
                    }) && pems(&self.bundle)
                        .iter()
                        .any(|b| b.contents == pem.contents)
                });
                if !usable {
                    return Plan::PublishNextCa;
                }
                if overlap_over {
                    return Plan::PromoteNextCa;
                }
            }
            None if seconds_left(&signer, now) <= ca_threshold => return Plan::PublishNextCa,
            None if overlap_over && pems(&self.bundle).len() > 1 => return Plan::DropOldCas,
            None => {}
        }
        let Some(serving_pem) = first_pem(&self.cert) else {
            return Plan::Renew("the serving certificate is not PEM".to_owned());
        };
        let Ok(serving) = serving_pem.parse_x509() else {
            return Plan::Renew("the serving certificate does not parse".to_owned());
        };
        if !key_matches(&self.key, &serving) {
            return Plan::Renew("the serving key does not belong to its certificate".to_owned());
        }
        if serving.verify_signature(Some(signer.public_key())).is_err() {
            return Plan::Renew("the serving certificate is not signed by the CA".to_owned());
        }
        if let Some(name) = config
            .dns_names()
            .into_iter()
            .find(|name| !covers(&serving, name))
        {
            return Plan::Renew(format!("the serving certificate is not for {name}"));
        }
        let threshold = i64::try_from(config.renewal_threshold().as_secs()).unwrap_or(i64::MAX);
        let left = seconds_left(&serving, now);
        // A certificate that already ends with its CA is not renewed: a new one would end
        // there too. The CA's rotation renews it.
        let extends =
            signer.validity().not_after.timestamp() > serving.validity().not_after.timestamp();
        if left <= threshold && extends {
            return Plan::Renew(format!("the serving certificate has {left} s left"));
        }
        Plan::Keep
    }

    /// When the serving certificate expires, if it parses.
    pub(crate) fn serving_not_after(&self) -> Option<SystemTime> {
        let pem = first_pem(&self.cert)?;
        let cert = pem.parse_x509().ok()?;
        let secs = u64::try_from(cert.validity().not_after.timestamp()).ok()?;
        Some(UNIX_EPOCH + Duration::from_secs(secs))
    }
}

/// A serving certificate for `config`'s names signed by the CA: (certificate, key), PEM.
fn issue(
    ca_cert: &str,
    ca_key: &str,
    config: &SelfSignedConfig,
    now: SystemTime,
) -> Result<(String, String), rcgen::Error> {
    let signer_key = KeyPair::from_pem(ca_key)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert, signer_key)?;
    let ca_end = first_pem(ca_cert)
        .and_then(|pem| {
            let cert = pem.parse_x509().ok()?;
            u64::try_from(cert.validity().not_after.timestamp()).ok()
        })
        .map(|secs| UNIX_EPOCH + Duration::from_secs(secs));
    let names = config.dns_names();
    let key = KeyPair::generate()?;
    // rcgen makes an IP SAN of a name that parses as an address, as Go's TLS client needs
    // for https://127.0.0.1.
    let mut params = CertificateParams::new(names.clone())?;
    let common_name = names.get(2).cloned().unwrap_or_default();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.not_before = (now - BACKDATE).into();
    let mut not_after = now + config.serving_validity_value();
    if let Some(end) = ca_end {
        not_after = not_after.min(end);
    }
    params.not_after = not_after.into();
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Unix seconds.
fn unix(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// The `CERTIFICATE` blocks of a PEM bundle, each as PEM text ending in a newline.
fn pem_blocks(text: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    text.split_inclusive(END)
        .filter(|block| block.contains(END))
        .map(|block| format!("{}\n", block.trim()))
        .collect()
}

fn pems(text: &str) -> Vec<Pem> {
    Pem::iter_from_buffer(text.as_bytes())
        .filter_map(Result::ok)
        .filter(|pem| pem.label == "CERTIFICATE")
        .collect()
}

fn first_pem(text: &str) -> Option<Pem> {
    pems(text).into_iter().next()
}

fn key_matches(key_pem: &str, cert: &X509Certificate<'_>) -> bool {
    KeyPair::from_pem(key_pem)
        .is_ok_and(|key| key.public_key_raw() == cert.public_key().subject_public_key.data.as_ref())
}

fn seconds_left(cert: &X509Certificate<'_>, now: SystemTime) -> i64 {
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    cert.validity().not_after.timestamp().saturating_sub(now)
}

fn covers(cert: &X509Certificate<'_>, name: &str) -> bool {
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return false;
    };
    let ip = name.parse::<IpAddr>().ok();
    san.value
        .general_names
        .iter()
        .any(|general| match (general, ip) {
            (GeneralName::DNSName(dns), None) => dns.eq_ignore_ascii_case(name),
            (GeneralName::IPAddress(bytes), Some(IpAddr::V4(v4))) => *bytes == v4.octets(),
            (GeneralName::IPAddress(bytes), Some(IpAddr::V6(v6))) => *bytes == v6.octets(),
            _ => false,
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config() -> SelfSignedConfig {
        SelfSignedConfig::new("certs", "ns", "hooks")
            .extra_names(["127.0.0.1"])
            .serving_validity(Duration::from_secs(3600))
    }

    #[test]
    fn generated_material_is_kept_and_serves() {
        let now = SystemTime::now();
        let material = Material::generate(&config(), now).unwrap();
        assert_eq!(material.plan(&config(), now), Plan::Keep);
        rudder_webhook::parse_pem_pair(material.cert.as_bytes(), material.key.as_bytes()).unwrap();
        assert_eq!(material.bundle, material.signer_cert);
        let not_after = material.serving_not_after().unwrap();
        let validity = not_after.duration_since(now).unwrap();
        assert!(validity <= Duration::from_secs(3600) && validity >= Duration::from_secs(3598));
    }

    #[test]
    fn serving_certificate_covers_the_service_names_and_extra_ip() {
        let material = Material::generate(&config(), SystemTime::now()).unwrap();
        let pem = first_pem(&material.cert).unwrap();
        let cert = pem.parse_x509().unwrap();
        for name in config().dns_names() {
            assert!(covers(&cert, &name), "{name}");
        }
        assert!(!covers(&cert, "other.ns.svc"));
        assert!(!covers(&cert, "127.0.0.2"));
    }

    #[test]
    fn renewal_is_due_once_less_than_the_threshold_is_left() {
        let now = SystemTime::now();
        let material = Material::generate(&config(), now).unwrap();
        // 3600 s validity: renewed with 1800 s (half) left.
        let before = now + Duration::from_secs(1790);
        assert_eq!(material.plan(&config(), before), Plan::Keep);
        let after = now + Duration::from_secs(1810);
        assert!(matches!(material.plan(&config(), after), Plan::Renew(_)));
        // A configured threshold below half the validity wins.
        let tight = config().renew_before(Duration::from_secs(60));
        assert_eq!(material.plan(&tight, after), Plan::Keep);
        let late = now + Duration::from_secs(3550);
        assert!(matches!(material.plan(&tight, late), Plan::Renew(_)));
    }

    #[test]
    fn renewal_keeps_the_ca_and_makes_a_fresh_certificate() {
        let now = SystemTime::now();
        let material = Material::generate(&config(), now).unwrap();
        let later = now + Duration::from_secs(2000);
        let renewed = material.renew(&config(), later).unwrap();
        assert_eq!(renewed.bundle, material.bundle);
        assert_eq!(renewed.signer_key, material.signer_key);
        assert_ne!(renewed.cert, material.cert);
        assert_eq!(renewed.plan(&config(), later), Plan::Keep);
        let end = renewed.serving_not_after().unwrap();
        assert!(end > material.serving_not_after().unwrap());
    }

    #[test]
    fn serving_certificate_never_outlives_the_ca() {
        let short_ca = config().ca_validity(Duration::from_secs(600));
        let now = SystemTime::now();
        let material = Material::generate(&short_ca, now).unwrap();
        let end = material.serving_not_after().unwrap();
        assert!(end <= now + Duration::from_secs(600));
    }

    #[test]
    fn changed_names_or_a_foreign_certificate_are_renewed() {
        let now = SystemTime::now();
        let material = Material::generate(&config(), now).unwrap();
        let more = config().extra_names(["hooks.example.com"]);
        assert!(
            matches!(material.plan(&more, now), Plan::Renew(r) if r.contains("hooks.example.com"))
        );
        let other = Material::generate(&config(), now).unwrap();
        let mixed = Material {
            cert: other.cert,
            key: other.key,
            ..material.clone()
        };
        assert!(matches!(mixed.plan(&config(), now), Plan::Renew(r) if r.contains("not signed")));
        let mismatched = Material {
            key: material.signer_key.clone(),
            ..material
        };
        assert!(matches!(mismatched.plan(&config(), now), Plan::Renew(_)));
    }

    #[test]
    fn an_unusable_or_expired_ca_is_regenerated() {
        let now = SystemTime::now();
        let material = Material::generate(&config(), now).unwrap();
        let garbage = Material {
            signer_cert: "garbage".to_owned(),
            ..material.clone()
        };
        assert!(matches!(garbage.plan(&config(), now), Plan::Regenerate(_)));
        let untrusted = Material {
            bundle: String::new(),
            ..material.clone()
        };
        assert!(matches!(
            untrusted.plan(&config(), now),
            Plan::Regenerate(_)
        ));
        let after_ca = now + DEFAULT_CA_VALIDITY_FOR_TEST + Duration::from_secs(1);
        assert!(
            matches!(material.plan(&config(), after_ca), Plan::Regenerate(r) if r.contains("expired"))
        );
    }

    #[test]
    fn ca_rotation_publishes_then_signs_with_then_drops() {
        let config = config()
            .ca_validity(Duration::from_secs(1000))
            .ca_overlap(Duration::from_secs(60));
        let t0 = SystemTime::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let m0 = Material::generate(&config, t0).unwrap();
        // The serving certificate ends with the CA: renewing it would not help, so it is kept
        // although less than half its validity is left.
        assert_eq!(m0.plan(&config, t0), Plan::Keep);
        assert_eq!(m0.plan(&config, at(499)), Plan::Keep);

        // Half the CA's validity left: the next CA joins the bundle; nothing signs with it yet.
        assert_eq!(m0.plan(&config, at(501)), Plan::PublishNextCa);
        let m1 = m0.advance(&Plan::PublishNextCa, &config, at(501)).unwrap();
        let (next_cert, _) = m1.next.clone().unwrap();
        assert_eq!(
            pem_blocks(&m1.bundle),
            [m0.signer_cert.clone(), next_cert.clone()]
        );
        assert_eq!((&m1.signer_cert, &m1.cert), (&m0.signer_cert, &m0.cert));
        assert_eq!(m1.plan(&config, at(540)), Plan::Keep);

        // After the overlap the next CA signs a new serving certificate; both stay trusted.
        assert_eq!(m1.plan(&config, at(562)), Plan::PromoteNextCa);
        let m2 = m1.advance(&Plan::PromoteNextCa, &config, at(562)).unwrap();
        assert_eq!(m2.signer_cert, next_cert);
        assert!(m2.next.is_none());
        assert_ne!(m2.cert, m0.cert);
        assert_eq!(m2.bundle, m1.bundle);
        assert_eq!(m2.plan(&config, at(600)), Plan::Keep);

        // Another overlap later the old CA leaves the bundle.
        assert_eq!(m2.plan(&config, at(623)), Plan::DropOldCas);
        let m3 = m2.advance(&Plan::DropOldCas, &config, at(623)).unwrap();
        assert_eq!(pem_blocks(&m3.bundle), [next_cert]);
        assert_eq!(m3.plan(&config, at(623)), Plan::Keep);
        // The new serving certificate outlives the old CA.
        assert!(m3.serving_not_after().unwrap() > at(1000));
        assert_eq!(Material::from_data(Some(&m1.to_data())).unwrap(), m1);
    }

    const DEFAULT_CA_VALIDITY_FOR_TEST: Duration = crate::config::DEFAULT_CA_VALIDITY;

    #[test]
    fn data_round_trips_and_missing_keys_are_named() {
        let material = Material::generate(&config(), SystemTime::now()).unwrap();
        let data = material.to_data();
        assert_eq!(Material::from_data(Some(&data)).unwrap(), material);
        let mut partial = data;
        partial.remove(CA_SIGNER_KEY);
        let err = Material::from_data(Some(&partial)).unwrap_err();
        assert_eq!(err.to_string(), "the Secret has no ca-signer.key");
        assert!(Material::from_data(None).is_err());
    }
}
