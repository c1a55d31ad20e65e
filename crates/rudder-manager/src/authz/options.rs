//! [`SecureMetrics`]: where the secure metrics server's certificate comes from, how long
//! decisions are kept, and what the filter has done so far.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rudder_webhook::{CertificateStore, DEFAULT_CERT_NAME, DEFAULT_KEY_NAME};

#[cfg(doc)]
use super::service::MAX_TOKEN_LENGTH;
use super::service::{Auth, Authorized, SharedState};

/// by default.
pub const DEFAULT_ALLOWED_TTL: Duration = Duration::from_secs(10);
/// How long a refusal (a token the API server does not authenticate, a request it does not
/// authorize) is reused by default: shorter, so a role just granted takes effect soon.
pub const DEFAULT_DENIED_TTL: Duration = Duration::from_secs(2);
/// How many decisions each of the two caches (tokens, and user-verb-path) holds at most by
/// default.
pub const DEFAULT_CACHE_CAPACITY: usize = 1024;
/// How long a TokenReview or SubjectAccessReview may take before the request is answered
/// `503` by default.
pub const DEFAULT_REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Serves `/metrics` (and the extra handlers) over HTTPS to callers the API server
/// authenticates and authorizes, as controller-runtime's
/// `metrics/filters.WithAuthenticationAndAuthorization` does; set it with
/// [`ManagerBuilder::secure_metrics`](crate::ManagerBuilder::secure_metrics).
///
/// Each request must carry `Authorization: Bearer <token>`. The manager's client sends the
/// token in an `authentication.k8s.io/v1` TokenReview, then the user, groups, uid and extra
/// it names in an `authorization.k8s.io/v1` SubjectAccessReview for the request's verb
/// (`get` for `GET` and `HEAD`, else the method in lower case) on the non-resource URL of
/// its path (`/metrics`, or an extra handler's path). The answer is
///
/// - `401` with `WWW-Authenticate: Bearer` without a token, or with one the API server does
///   not authenticate (or longer than [`MAX_TOKEN_LENGTH`]);
/// - `403` if the user is not allowed;
/// - `500` if a review fails (the API server cannot be reached, or refuses the review:
///   missing RBAC), `503` if it takes longer than [`DEFAULT_REVIEW_TIMEOUT`]; a failure is
///   not cached, so the next request asks again.
///
/// Decisions are cached, so a scrape every few seconds costs no API call most of the time:
/// tokens (kept only as a 128-bit hash keyed with random per-process keys, never logged)
/// to their user, and (user, groups, uid, extra, verb, path) to allowed or not; allowed
/// answers for [`DEFAULT_ALLOWED_TTL`], refusals for [`DEFAULT_DENIED_TTL`]. Concurrent
/// requests that need the same review share one. Each cache holds at most
/// [`DEFAULT_CACHE_CAPACITY`] decisions; when full, expired ones go first, then the ones
/// closest to expiry, so a flood of distinct garbage tokens costs reviews but never memory
/// without bound. [`stats`](Self::stats) counts reviews sent and decisions held.
///
/// The certificate comes from `tls.crt` and `tls.key` in a directory
/// ([`files`](Self::files), read again every 10 s as the webhook server's are), from a
/// [`CertificateStore`] another source fills and rotates
/// ([`certificate_store`](Self::certificate_store)), or from the manager's self-signed
/// certificates ([`self_signed`](Self::self_signed)). Probes stay on plain HTTP.
///
/// # RBAC
///
/// The operator's service account needs, cluster-wide:
///
/// ```yaml
/// - apiGroups: ["authentication.k8s.io"]
///   resources: ["tokenreviews"]
///   verbs: ["create"]
/// - apiGroups: ["authorization.k8s.io"]
///   resources: ["subjectaccessreviews"]
///   verbs: ["create"]
/// ```
///
/// and a scraper (Prometheus' service account) a ClusterRole with
/// `nonResourceURLs: ["/metrics"]`, `verbs: ["get"]`, bound to it.
#[derive(Clone, Debug)]
pub struct SecureMetrics {
    pub(crate) certificate: MetricsCertificate,
    pub(crate) review_timeout: Duration,
    pub(crate) cert_poll_period: Duration,
    shared: Arc<SharedState>,
}

/// Where the secure metrics server's certificate comes from.
#[derive(Clone, Debug)]
pub(crate) enum MetricsCertificate {
    Files {
        cert: PathBuf,
        key: PathBuf,
    },
    Store(CertificateStore),
    /// The manager's self-signed source: resolved to its store when the manager is built,
    /// filled when it starts (after the metrics server binds).
    SelfSigned,
    /// The self-signed source's store, resolved.
    SelfSignedStore(CertificateStore),
}

/// What the secure metrics filter has done so far ([`SecureMetrics::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthStats {
    /// TokenReviews sent to the API server.
    pub token_reviews: u64,
    /// SubjectAccessReviews sent to the API server.
    pub access_reviews: u64,
    /// Token decisions held in the cache now.
    pub cached_tokens: usize,
    /// Access decisions held in the cache now.
    pub cached_access: usize,
}

impl SecureMetrics {
    /// Serves the certificate and key in `dir`'s `tls.crt` and `tls.key` (a Secret volume,
    /// say), read at start (a missing or bad pair fails the start) and every 10 s after.
    pub fn files(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        Self::new(MetricsCertificate::Files {
            cert: dir.join(DEFAULT_CERT_NAME),
            key: dir.join(DEFAULT_KEY_NAME),
        })
    }

    /// Serves whatever certificate `store` holds at each handshake (filled and rotated by
    /// another source, such as a self-signed one). A store still empty at start is logged
    /// (a warning), not an error: the source may fill it while the manager starts, after the
    /// metrics server binds; until then every handshake fails.
    pub fn certificate_store(store: CertificateStore) -> Self {
        Self::new(MetricsCertificate::Store(store))
    }

    /// Serves the manager's self-signed certificate
    /// ([`ManagerBuilder::self_signed_webhook_certificates`], which must be set too, or
    /// [`build`](crate::ManagerBuilder::build) fails with
    /// [`BuildError::SecureMetricsWithoutSelfSigned`](crate::BuildError::SecureMetricsWithoutSelfSigned)):
    /// the serving certificate the webhook server serves, from the CA in the shared Secret,
    /// renewed and swapped in the same way. Add the metrics Service's names to the
    /// certificate with [`SelfSignedConfig::extra_names`](rudder_certs::SelfSignedConfig::extra_names)
    /// (a scraper that checks names needs them); the scraper trusts the Secret's
    /// `ca.crt`.
    ///
    /// The metrics server binds before the certificates are loaded (the first load may
    /// create the Secret), so until `start` has loaded them, handshakes fail; a load that
    /// fails ends `start` with [`Error::Certificates`](crate::Error::Certificates).
    ///
    /// [`ManagerBuilder::self_signed_webhook_certificates`]: crate::ManagerBuilder::self_signed_webhook_certificates
    pub fn self_signed() -> Self {
        Self::new(MetricsCertificate::SelfSigned)
    }

    /// Resolves [`self_signed`](Self::self_signed) to the manager's self-signed store;
    /// `false` if it needs one and there is none.
    pub(crate) fn resolve(&mut self, store: Option<&CertificateStore>) -> bool {
        if matches!(self.certificate, MetricsCertificate::SelfSigned) {
            match store {
                Some(store) => {
                    self.certificate = MetricsCertificate::SelfSignedStore(store.clone());
                }
                None => return false,
            }
        }
        true
    }

    fn new(certificate: MetricsCertificate) -> Self {
        Self {
            certificate,
            review_timeout: DEFAULT_REVIEW_TIMEOUT,
            cert_poll_period: rudder_webhook::DEFAULT_CERT_POLL_PERIOD,
            shared: Arc::new(SharedState::new(
                DEFAULT_ALLOWED_TTL,
                DEFAULT_DENIED_TTL,
                DEFAULT_CACHE_CAPACITY,
            )),
        }
    }

    /// How long decisions are reused: `allowed` for an authenticated token and an authorized
    /// request (default [`DEFAULT_ALLOWED_TTL`]), `denied` for refusals (default
    /// [`DEFAULT_DENIED_TTL`]). Zero turns that half of the caching off.
    pub fn cache_ttl(mut self, allowed: Duration, denied: Duration) -> Self {
        let capacity = self.shared.tokens.capacity;
        self.shared = Arc::new(SharedState::new(allowed, denied, capacity));
        self
    }

    /// How many decisions each cache holds at most (default [`DEFAULT_CACHE_CAPACITY`];
    /// at least 1).
    pub fn cache_capacity(mut self, capacity: usize) -> Self {
        let (allowed, denied) = (self.shared.allowed_ttl, self.shared.denied_ttl);
        self.shared = Arc::new(SharedState::new(allowed, denied, capacity.max(1)));
        self
    }

    /// How long a review may take before the request is answered `503` (default
    /// [`DEFAULT_REVIEW_TIMEOUT`]).
    pub fn review_timeout(mut self, timeout: Duration) -> Self {
        self.review_timeout = timeout;
        self
    }

    /// How often certificate files are read again (default 10 s; at least 10 ms). No effect
    /// with a certificate store.
    pub fn cert_poll_period(mut self, period: Duration) -> Self {
        self.cert_poll_period = period.max(Duration::from_millis(10));
        self
    }

    /// Reviews sent and decisions cached so far, by every server started with this option
    /// or a clone of it. The cache settings ([`cache_ttl`](Self::cache_ttl),
    /// [`cache_capacity`](Self::cache_capacity)) start a fresh cache, so take the clone to
    /// watch after them.
    pub fn stats(&self) -> AuthStats {
        AuthStats {
            token_reviews: self.shared.token_reviews.load(Ordering::Relaxed),
            access_reviews: self.shared.access_reviews.load(Ordering::Relaxed),
            cached_tokens: self.shared.tokens.len(),
            cached_access: self.shared.access.len(),
        }
    }

    /// The filter in front of `inner`, reviewing with `client`.
    pub(crate) fn filter<S>(&self, client: kube::Client, inner: S) -> Authorized<S> {
        Authorized {
            inner,
            auth: Arc::new(Auth {
                client,
                timeout: self.review_timeout,
                shared: Arc::clone(&self.shared),
            }),
        }
    }
}
