//! [`SelfSignedConfig`]: which Secret holds the certificates, the names they are for, how
//! long they are valid, when they are renewed; [`InjectTargets`]: where the CA goes.

use std::time::Duration;

/// The field manager of every write this crate makes.
pub(crate) const FIELD_MANAGER: &str = "rudder-certs";

/// How long the CA is valid by default: ten years.
pub const DEFAULT_CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long a serving certificate is valid by default: one year.
pub const DEFAULT_SERVING_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// How much time a serving certificate has left when it is renewed, by default: 90 days
/// (never more than half its validity, see [`SelfSignedConfig::renew_before`]).
pub const DEFAULT_RENEW_BEFORE: Duration = Duration::from_secs(90 * 24 * 3600);
/// How much time the CA has left when its rotation begins, by default: one year (never
/// more than half its validity).
pub const DEFAULT_CA_RENEW_BEFORE: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long each step of a CA rotation waits for the changed bundle to reach every client,
/// by default: one hour.
pub const DEFAULT_CA_OVERLAP: Duration = Duration::from_secs(3600);
/// How often each replica checks the Secret's certificates by default: hourly.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(3600);

/// The objects whose `caBundle` is kept equal to the Secret's CA bundle, by name.
///
/// Every webhook entry of the named webhook configurations gets it in its `clientConfig`;
/// a named CRD gets it in `spec.conversion.webhook.clientConfig` when its conversion
/// strategy is `Webhook` (a CRD without webhook conversion is left alone).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InjectTargets {
    /// Names of `MutatingWebhookConfiguration`s.
    pub mutating: Vec<String>,
    /// Names of `ValidatingWebhookConfiguration`s.
    pub validating: Vec<String>,
    /// Names of `CustomResourceDefinition`s (`<plural>.<group>`).
    pub crds: Vec<String>,
}

impl InjectTargets {
    /// No targets.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a `MutatingWebhookConfiguration`.
    pub fn mutating(mut self, name: impl Into<String>) -> Self {
        self.mutating.push(name.into());
        self
    }

    /// Adds a `ValidatingWebhookConfiguration`.
    pub fn validating(mut self, name: impl Into<String>) -> Self {
        self.validating.push(name.into());
        self
    }

    /// Adds a CRD whose webhook conversion is served here.
    pub fn crd(mut self, name: impl Into<String>) -> Self {
        self.crds.push(name.into());
        self
    }

    /// Whether there is nothing to inject into.
    pub fn is_empty(&self) -> bool {
        self.mutating.is_empty() && self.validating.is_empty() && self.crds.is_empty()
    }
}

/// Where the self-signed certificates live and what they are for.
///
/// ```
/// use std::time::Duration;
/// use rudder_certs::{InjectTargets, SelfSignedConfig};
///
/// let config = SelfSignedConfig::new("my-operator-webhook-certs", "my-operator", "my-operator-webhook")
///     .inject(InjectTargets::new().validating("my-operator-validating"))
///     .check_interval(Duration::from_secs(600));
/// assert_eq!(config.dns_names()[2], "my-operator-webhook.my-operator.svc");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfSignedConfig {
    pub(crate) secret: String,
    pub(crate) namespace: String,
    pub(crate) service: String,
    pub(crate) extra_names: Vec<String>,
    pub(crate) inject: InjectTargets,
    pub(crate) ca_validity: Duration,
    pub(crate) serving_validity: Duration,
    pub(crate) renew_before: Duration,
    pub(crate) ca_renew_before: Duration,
    pub(crate) ca_overlap: Duration,
    pub(crate) check_interval: Duration,
}

impl SelfSignedConfig {
    /// Certificates kept in Secret `secret` of `namespace`, for Service `service` of that
    /// namespace (the one the API server calls the webhooks through).
    pub fn new(
        secret: impl Into<String>,
        namespace: impl Into<String>,
        service: impl Into<String>,
    ) -> Self {
        Self {
            secret: secret.into(),
            namespace: namespace.into(),
            service: service.into(),
            extra_names: Vec::new(),
            inject: InjectTargets::default(),
            ca_validity: DEFAULT_CA_VALIDITY,
            serving_validity: DEFAULT_SERVING_VALIDITY,
            renew_before: DEFAULT_RENEW_BEFORE,
            ca_renew_before: DEFAULT_CA_RENEW_BEFORE,
            ca_overlap: DEFAULT_CA_OVERLAP,
            check_interval: DEFAULT_CHECK_INTERVAL,
        }
    }

    /// More names for the serving certificate besides the Service's: DNS names, or IP
    /// addresses (`127.0.0.1` for a webhook called by URL on loopback, as in tests).
    pub fn extra_names(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.extra_names.extend(names.into_iter().map(Into::into));
        self
    }

    /// The configurations and CRDs whose `caBundle` is kept right.
    pub fn inject(mut self, targets: InjectTargets) -> Self {
        self.inject = targets;
        self
    }

    /// How long a new CA is valid (default ten years). It is rotated before it ends (see
    /// [`ca_renew_before`](Self::ca_renew_before)).
    pub fn ca_validity(mut self, validity: Duration) -> Self {
        self.ca_validity = validity;
        self
    }

    /// How long a new serving certificate is valid (default one year; never past the CA's
    /// end).
    pub fn serving_validity(mut self, validity: Duration) -> Self {
        self.serving_validity = validity;
        self
    }

    /// Renew the serving certificate when it has less than this left (default 90 days).
    /// Capped at half the serving validity, so a short validity (in tests) still renews
    /// halfway instead of on every check.
    pub fn renew_before(mut self, left: Duration) -> Self {
        self.renew_before = left;
        self
    }

    /// Begin the CA's rotation when it has less than this left (default one year, at most
    /// half the CA validity): the next CA is published in the bundle beside the current one,
    /// signs the serving certificate [`ca_overlap`](Self::ca_overlap) later, and the old CA
    /// leaves the bundle another `ca_overlap` later. Keep it well above twice `ca_overlap`
    /// plus the check interval.
    pub fn ca_renew_before(mut self, left: Duration) -> Self {
        self.ca_renew_before = left;
        self
    }

    /// How long each step of a CA rotation waits for the changed bundle to reach every
    /// client (injected, and seen by the API server) before the next step relies on it
    /// (default one hour).
    pub fn ca_overlap(mut self, overlap: Duration) -> Self {
        self.ca_overlap = overlap;
        self
    }

    /// How often each replica checks the Secret's certificates and renews what is due
    /// (default hourly). Changes other replicas make are seen at once, through a watch.
    pub fn check_interval(mut self, interval: Duration) -> Self {
        self.check_interval = interval;
        self
    }

    /// The Secret's name.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The Secret's (and the Service's) namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Service's name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// What to inject the CA into.
    pub fn inject_targets(&self) -> &InjectTargets {
        &self.inject
    }

    /// The names the serving certificate is for: `svc`, `svc.ns`, `svc.ns.svc`,
    /// `svc.ns.svc.cluster.local`, then the extra names.
    pub fn dns_names(&self) -> Vec<String> {
        let (svc, ns) = (&self.service, &self.namespace);
        let mut names = vec![
            svc.clone(),
            format!("{svc}.{ns}"),
            format!("{svc}.{ns}.svc"),
            format!("{svc}.{ns}.svc.cluster.local"),
        ];
        for name in &self.extra_names {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }

    /// The time left at which the serving certificate is renewed: the configured
    /// [`renew_before`](Self::renew_before), at most half the serving validity.
    pub fn renewal_threshold(&self) -> Duration {
        self.renew_before.min(self.serving_validity / 2)
    }

    /// The time left at which the CA's rotation begins: the configured
    /// [`ca_renew_before`](Self::ca_renew_before), at most half the CA validity.
    pub fn ca_renewal_threshold(&self) -> Duration {
        self.ca_renew_before.min(self.ca_validity / 2)
    }

    /// The CA overlap (see [`ca_overlap`](Self::ca_overlap)).
    pub fn ca_overlap_value(&self) -> Duration {
        self.ca_overlap
    }

    /// The serving validity (see [`serving_validity`](Self::serving_validity)).
    pub fn serving_validity_value(&self) -> Duration {
        self.serving_validity
    }

    /// The CA validity (see [`ca_validity`](Self::ca_validity)).
    pub fn ca_validity_value(&self) -> Duration {
        self.ca_validity
    }

    /// The check interval (see [`check_interval`](Self::check_interval)).
    pub fn check_interval_value(&self) -> Duration {
        self.check_interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_threshold_is_at_most_half_the_validity() {
        let config = SelfSignedConfig::new("s", "ns", "svc");
        assert_eq!(config.renewal_threshold(), DEFAULT_RENEW_BEFORE);
        let short = config.serving_validity(Duration::from_secs(20));
        assert_eq!(short.renewal_threshold(), Duration::from_secs(10));
    }

    #[test]
    fn names_cover_the_service_and_extras_once() {
        let config =
            SelfSignedConfig::new("s", "ns", "svc").extra_names(["127.0.0.1", "svc.ns", "x"]);
        assert_eq!(
            config.dns_names(),
            [
                "svc",
                "svc.ns",
                "svc.ns.svc",
                "svc.ns.svc.cluster.local",
                "127.0.0.1",
                "x"
            ]
        );
    }
}
