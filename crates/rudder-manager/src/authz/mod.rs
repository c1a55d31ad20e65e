//! Secure metrics: [`SecureMetrics`] (the option) and the tower service that lets a request
//! through only if the API server authenticates its bearer token (TokenReview) and authorizes
//! the user for the request's verb on its path (SubjectAccessReview), with cached decisions.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::hash::{BuildHasher, Hash, RandomState};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Bytes;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use rudder_server::Body;
use rudder_webhook::{CertificateStore, DEFAULT_CERT_NAME, DEFAULT_KEY_NAME};
use tokio::time::Instant;

/// How long an allowed decision (an authenticated token, an authorized request) is reused
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
/// The longest bearer token sent to the API server for review; a longer one is refused
/// (`401`) without a review. Service account tokens are about 1 KiB, OIDC tokens a few.
pub const MAX_TOKEN_LENGTH: usize = 16 * 1024;

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

/// Why a review could not be made; the request is answered `500` (`503` for a timeout) and
/// nothing is cached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ReviewError {
    /// The API server could not be reached or refused the review (the operator may lack
    /// the RBAC to create reviews). Retrying helps once the cause is fixed.
    #[error("{what} failed")]
    Api {
        /// `token review` or `subject access review`.
        what: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The review took longer than the review timeout.
    #[error("{what} timed out after {timeout:?}")]
    Timeout {
        /// `token review` or `subject access review`.
        what: &'static str,
        /// The timeout.
        timeout: Duration,
    },
}

/// The state every clone of one [`SecureMetrics`] shares: the caches and the counters.
#[derive(Debug)]
struct SharedState {
    allowed_ttl: Duration,
    denied_ttl: Duration,
    /// Keys the token hash; two independent random keys make 128 bits.
    hashers: (RandomState, RandomState),
    tokens: DecisionCache<u128, Authn>,
    access: DecisionCache<AccessKey, bool>,
    token_reviews: AtomicU64,
    access_reviews: AtomicU64,
}

impl SharedState {
    fn new(allowed_ttl: Duration, denied_ttl: Duration, capacity: usize) -> Self {
        Self {
            allowed_ttl,
            denied_ttl,
            hashers: (RandomState::new(), RandomState::new()),
            tokens: DecisionCache::new(capacity),
            access: DecisionCache::new(capacity),
            token_reviews: AtomicU64::new(0),
            access_reviews: AtomicU64::new(0),
        }
    }

    fn token_key(&self, token: &str) -> u128 {
        let high = self.hashers.0.hash_one(token);
        let low = self.hashers.1.hash_one(token);
        (u128::from(high) << 64) | u128::from(low)
    }
}

/// What the API server said of a token.
#[derive(Clone, Debug)]
enum Authn {
    Authenticated(Arc<UserInfo>),
    Unauthenticated,
}

/// An access decision's key: who, doing what, where.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct AccessKey {
    user: String,
    uid: Option<String>,
    groups: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
    verb: String,
    path: String,
}

/// The filter: a tower service in front of the metrics routes.
#[derive(Clone)]
pub(crate) struct Authorized<S> {
    inner: S,
    auth: Arc<Auth>,
}

struct Auth {
    client: kube::Client,
    timeout: Duration,
    shared: Arc<SharedState>,
}

type Answer = Response<Full<Bytes>>;

impl<S> tower_service::Service<Request<Body>> for Authorized<S>
where
    S: tower_service::Service<Request<Body>, Response = Answer, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Answer, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let auth = Arc::clone(&self.auth);
        let mut inner = self.inner.clone();
        Box::pin(async move {
            if let Some(refusal) = auth.check(&request).await {
                return Ok(refusal);
            }
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            inner.call(request).await
        })
    }
}

impl Auth {
    /// `None` if the request may go through; otherwise the answer to give it.
    async fn check(&self, request: &Request<Body>) -> Option<Answer> {
        let Some(token) = bearer_token(request) else {
            return Some(unauthorized());
        };
        let key = self.shared.token_key(token);
        let authn = self
            .shared
            .tokens
            .get_or_review(
                key,
                |authn| self.ttl(matches!(authn, Authn::Authenticated(_))),
                || {
                    self.shared.token_reviews.fetch_add(1, Ordering::Relaxed);
                    review_token(self.client.clone(), token.to_owned(), self.timeout).boxed()
                },
            )
            .await;
        let user = match authn {
            Ok(Authn::Authenticated(user)) => user,
            Ok(Authn::Unauthenticated) => return Some(unauthorized()),
            Err(error) => return Some(failed(&error)),
        };
        let key = AccessKey {
            user: user.username.clone().unwrap_or_default(),
            uid: user.uid.clone(),
            groups: user.groups.clone().unwrap_or_default(),
            extra: user.extra.clone().unwrap_or_default(),
            verb: verb(request.method()),
            path: request.uri().path().to_owned(),
        };
        let review_key = key.clone();
        let allowed = self
            .shared
            .access
            .get_or_review(
                key.clone(),
                |allowed| self.ttl(*allowed),
                || {
                    self.shared.access_reviews.fetch_add(1, Ordering::Relaxed);
                    review_access(self.client.clone(), review_key, self.timeout).boxed()
                },
            )
            .await;
        match allowed {
            Ok(true) => None,
            Ok(false) => {
                tracing::debug!(user = %key.user, verb = %key.verb, path = %key.path, "metrics request forbidden");
                Some(text(
                    StatusCode::FORBIDDEN,
                    format!(
                        "forbidden: user {:?} may not {} {}\n",
                        key.user, key.verb, key.path
                    ),
                ))
            }
            Err(error) => Some(failed(&error)),
        }
    }

    fn ttl(&self, allowed: bool) -> Duration {
        if allowed {
            self.shared.allowed_ttl
        } else {
            self.shared.denied_ttl
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header: the scheme in any case, one
/// token of visible ASCII, at most [`MAX_TOKEN_LENGTH`] bytes.
fn bearer_token<B>(request: &Request<B>) -> Option<&str> {
    let mut values = request.headers().get_all(header::AUTHORIZATION).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let value = value.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    let valid = scheme.eq_ignore_ascii_case("bearer")
        && !token.is_empty()
        && token.len() <= MAX_TOKEN_LENGTH
        && token.bytes().all(|b| b.is_ascii_graphic());
    valid.then_some(token)
}

/// The authorization verb of a non-resource request.
fn verb(method: &http::Method) -> String {
    if method == http::Method::GET || method == http::Method::HEAD {
        "get".to_owned()
    } else {
        method.as_str().to_ascii_lowercase()
    }
}

async fn review_token(
    client: kube::Client,
    token: String,
    timeout: Duration,
) -> Result<Authn, ReviewError> {
    const WHAT: &str = "token review";
    let review = TokenReview {
        spec: TokenReviewSpec {
            // `token` is a `String` in some Kubernetes versions' types and an `Option` in
            // others; `into` fits both.
            #[allow(clippy::useless_conversion)]
            token: token.into(),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let api: Api<TokenReview> = Api::all(client);
    let answer = tokio::time::timeout(timeout, api.create(&PostParams::default(), &review))
        .await
        .map_err(|_| ReviewError::Timeout {
            what: WHAT,
            timeout,
        })?
        .map_err(|source| ReviewError::Api { what: WHAT, source })?;
    let status = answer.status.unwrap_or_default();
    match (status.authenticated, status.user) {
        (Some(true), Some(user)) => Ok(Authn::Authenticated(Arc::new(user))),
        _ => {
            tracing::debug!(error = ?status.error, "metrics bearer token not authenticated");
            Ok(Authn::Unauthenticated)
        }
    }
}

async fn review_access(
    client: kube::Client,
    key: AccessKey,
    timeout: Duration,
) -> Result<bool, ReviewError> {
    const WHAT: &str = "subject access review";
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(key.user),
            uid: key.uid,
            groups: Some(key.groups),
            extra: Some(key.extra),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(key.path),
                verb: Some(key.verb),
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client);
    let answer = tokio::time::timeout(timeout, api.create(&PostParams::default(), &review))
        .await
        .map_err(|_| ReviewError::Timeout {
            what: WHAT,
            timeout,
        })?
        .map_err(|source| ReviewError::Api { what: WHAT, source })?;
    let status = answer.status.unwrap_or_default();
    Ok(status.allowed && !status.denied.unwrap_or(false))
}

fn unauthorized() -> Answer {
    let mut answer = text(StatusCode::UNAUTHORIZED, "unauthorized\n".to_owned());
    answer
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    answer
}

fn failed(error: &ReviewError) -> Answer {
    tracing::warn!(
        error = error as &dyn std::error::Error,
        "cannot review a metrics request"
    );
    let status = match error {
        ReviewError::Timeout { .. } => StatusCode::SERVICE_UNAVAILABLE,
        ReviewError::Api { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    };
    text(status, "cannot authorize the request\n".to_owned())
}

fn text(status: StatusCode, body: String) -> Answer {
    let mut answer = Response::new(Full::new(Bytes::from(body)));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    answer
}

/// A review in flight, shared by every request waiting for the same decision.
type Flight<V> = Shared<BoxFuture<'static, Result<V, Arc<ReviewError>>>>;

enum Slot<V> {
    Ready { value: V, expires: Instant },
    Pending { id: u64, flight: Flight<V> },
}

/// Decisions by key, each kept for a time that depends on the decision, at most `capacity`
/// of them; a key asked for while its review is in flight waits for that review.
struct DecisionCache<K, V> {
    slots: Mutex<HashMap<K, Slot<V>>>,
    capacity: usize,
    next_id: AtomicU64,
}

impl<K, V> std::fmt::Debug for DecisionCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionCache")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl<K, V> DecisionCache<K, V>
where
    K: Hash + Eq + Clone,
    V: Clone + Send + Sync + 'static,
{
    fn new(capacity: usize) -> Self {
        Self {
            slots: Mutex::new(HashMap::new()),
            capacity,
            next_id: AtomicU64::new(0),
        }
    }

    fn len(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The cached decision for `key`, or the one the review in flight for it reaches, or
    /// the one `review` reaches (cached for `ttl` of it; an error is not cached).
    async fn get_or_review(
        &self,
        key: K,
        ttl: impl FnOnce(&V) -> Duration,
        review: impl FnOnce() -> BoxFuture<'static, Result<V, ReviewError>>,
    ) -> Result<V, Arc<ReviewError>> {
        let (id, flight) = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            match slots.get(&key) {
                Some(Slot::Ready { value, expires }) if *expires > now => {
                    return Ok(value.clone());
                }
                Some(Slot::Pending { id, flight }) => (Some(*id), flight.clone()),
                _ => {
                    slots.remove(&key);
                    let flight = review().map(|r| r.map_err(Arc::new)).boxed().shared();
                    let id = self.make_room(&mut slots, now).then(|| {
                        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                        let pending = Slot::Pending {
                            id,
                            flight: flight.clone(),
                        };
                        slots.insert(key.clone(), pending);
                        id
                    });
                    (id, flight)
                }
            }
        };
        let result = flight.await;
        if let Some(id) = id {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            // The first waiter to finish settles the slot; the others find it settled.
            if matches!(slots.get(&key), Some(Slot::Pending { id: pending, .. }) if *pending == id)
            {
                match &result {
                    Ok(value) => {
                        let ttl = ttl(value);
                        if ttl.is_zero() {
                            slots.remove(&key);
                        } else {
                            let expires = Instant::now() + ttl;
                            let value = value.clone();
                            slots.insert(key, Slot::Ready { value, expires });
                        }
                    }
                    Err(_) => {
                        slots.remove(&key);
                    }
                }
            }
        }
        result
    }

    /// Makes room for one more slot: expired decisions and abandoned reviews go first, then
    /// the decisions closest to expiry. `false` if every slot is a review in flight (the new review is
    /// then made without being shared).
    fn make_room(&self, slots: &mut HashMap<K, Slot<V>>, now: Instant) -> bool {
        if slots.len() < self.capacity {
            return true;
        }
        slots.retain(|_, slot| match slot {
            Slot::Ready { expires, .. } => *expires > now,
            // A review nobody waits for any more (its requests were dropped) holds only
            // this slot's clone: it would never settle, so it goes too.
            Slot::Pending { flight, .. } => flight.strong_count().is_some_and(|n| n > 1),
        });
        while slots.len() >= self.capacity {
            let soonest = slots
                .iter()
                .filter_map(|(key, slot)| match slot {
                    Slot::Ready { expires, .. } => Some((*expires, key)),
                    Slot::Pending { .. } => None,
                })
                .min_by_key(|(expires, _)| *expires)
                .map(|(_, key)| key.clone());
            match soonest {
                Some(key) => {
                    slots.remove(&key);
                }
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(value: bool) -> BoxFuture<'static, Result<bool, ReviewError>> {
        futures::future::ready(Ok(value)).boxed()
    }

    fn ttl(allowed: &bool) -> Duration {
        if *allowed {
            Duration::from_secs(10)
        } else {
            Duration::from_secs(2)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn allowed_decisions_live_longer_than_denials() {
        let cache = DecisionCache::<&str, bool>::new(8);
        let reviews = AtomicU64::new(0);
        let ask = |key, value| {
            let reviews = &reviews;
            let cache = &cache;
            async move {
                cache
                    .get_or_review(key, ttl, || {
                        reviews.fetch_add(1, Ordering::Relaxed);
                        answer(value)
                    })
                    .await
                    .ok()
            }
        };
        assert_eq!(ask("yes", true).await, Some(true));
        assert_eq!(ask("no", false).await, Some(false));
        assert_eq!(reviews.load(Ordering::Relaxed), 2);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(ask("yes", false).await, Some(true), "cached");
        assert_eq!(ask("no", true).await, Some(false), "cached");
        assert_eq!(reviews.load(Ordering::Relaxed), 2);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(ask("yes", true).await, Some(true), "still cached");
        assert_eq!(ask("no", true).await, Some(true), "expired, reviewed again");
        assert_eq!(reviews.load(Ordering::Relaxed), 3);
        tokio::time::advance(Duration::from_secs(8)).await;
        assert_eq!(
            ask("yes", false).await,
            Some(false),
            "expired, reviewed again"
        );
        assert_eq!(reviews.load(Ordering::Relaxed), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_share_one_review() {
        let cache = Arc::new(DecisionCache::<&str, bool>::new(8));
        let reviews = Arc::new(AtomicU64::new(0));
        let (release, gate) = tokio::sync::oneshot::channel::<()>();
        let gate = gate.shared();
        let mut waiting = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let (cache, reviews, gate) = (Arc::clone(&cache), Arc::clone(&reviews), gate.clone());
            waiting.spawn(async move {
                cache
                    .get_or_review("token", ttl, move || {
                        reviews.fetch_add(1, Ordering::Relaxed);
                        async move {
                            let _ = gate.await;
                            Ok(true)
                        }
                        .boxed()
                    })
                    .await
                    .ok()
            });
        }
        // Let every task reach the cache before the review answers.
        while cache.len() == 0 || waiting.len() < 50 {
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(release.send(()).is_ok());
        while let Some(answer) = waiting.join_next().await {
            assert_eq!(answer.ok().flatten(), Some(true));
        }
        assert_eq!(reviews.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_not_cached() {
        let cache = DecisionCache::<&str, bool>::new(8);
        let failing = || {
            futures::future::ready(Err(ReviewError::Timeout {
                what: "test",
                timeout: Duration::ZERO,
            }))
            .boxed()
        };
        assert!(cache.get_or_review("k", ttl, failing).await.is_err());
        assert_eq!(cache.len(), 0);
        assert_eq!(
            cache.get_or_review("k", ttl, || answer(true)).await.ok(),
            Some(true)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_never_holds_more_than_its_capacity() {
        let cache = DecisionCache::<u32, bool>::new(16);
        cache.get_or_review(0, ttl, || answer(true)).await.ok();
        for key in 1..1000 {
            cache.get_or_review(key, ttl, || answer(false)).await.ok();
            assert!(cache.len() <= 16);
        }
        assert_eq!(cache.len(), 16);
        // The allowed decision expires last, so the denials made room: it is still cached.
        let found = cache.get_or_review(0, ttl, || answer(false)).await.ok();
        assert_eq!(found, Some(true));
    }

    #[tokio::test(start_paused = true)]
    async fn abandoned_reviews_do_not_hold_the_cache() {
        let cache = DecisionCache::<u32, bool>::new(4);
        for key in 0..4 {
            // A request that gives up (its client went away) while its review is in flight.
            let asking = cache.get_or_review(key, ttl, || futures::future::pending().boxed());
            assert!(asking.now_or_never().is_none());
        }
        assert_eq!(cache.len(), 4);
        let found = cache.get_or_review(9, ttl, || answer(true)).await.ok();
        assert_eq!(found, Some(true));
        assert_eq!(cache.len(), 1, "the abandoned reviews made room");
        let cached = cache.get_or_review(9, ttl, || answer(false)).await.ok();
        assert_eq!(cached, Some(true));
    }

    #[test]
    fn bearer_tokens_are_parsed_strictly() {
        let with = |value: &str| {
            let request = Request::builder()
                .header(header::AUTHORIZATION, value)
                .body(())
                .unwrap_or_default();
            bearer_token(&request).map(str::to_owned)
        };
        assert_eq!(with("Bearer abc.def"), Some("abc.def".to_owned()));
        assert_eq!(with("bearer  abc "), Some("abc".to_owned()));
        assert_eq!(with("Basic abc"), None);
        assert_eq!(with("Bearer"), None);
        assert_eq!(with("Bearer "), None);
        assert_eq!(with("Bearer a b"), None);
        assert_eq!(
            with(&format!("Bearer {}", "x".repeat(MAX_TOKEN_LENGTH + 1))),
            None
        );
        assert_eq!(bearer_token(&Request::new(())), None);
    }

    #[test]
    fn verbs_follow_the_method() {
        assert_eq!(verb(&http::Method::GET), "get");
        assert_eq!(verb(&http::Method::HEAD), "get");
        assert_eq!(verb(&http::Method::POST), "post");
    }

    #[test]
    fn token_keys_differ_per_token_and_not_per_call() {
        let state = SharedState::new(Duration::ZERO, Duration::ZERO, 1);
        assert_eq!(state.token_key("a"), state.token_key("a"));
        assert_ne!(state.token_key("a"), state.token_key("b"));
    }
}
