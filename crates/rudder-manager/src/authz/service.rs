//! The filter in front of the metrics routes: the bearer token reviewed, then the user's
//! access, each decision through its cache; and the answers to a request refused.

use std::convert::Infallible;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Bytes;
use rudder_server::Body;

use super::cache::DecisionCache;
use super::review::{AccessKey, Authn, ReviewError, review_access, review_token};

/// The longest bearer token sent to the API server for review; a longer one is refused
/// (`401`) without a review. Service account tokens are about 1 KiB, OIDC tokens a few.
pub const MAX_TOKEN_LENGTH: usize = 16 * 1024;

/// The state every clone of one [`SecureMetrics`] shares: the caches and the counters.
#[derive(Debug)]
pub(super) struct SharedState {
    pub(super) allowed_ttl: Duration,
    pub(super) denied_ttl: Duration,
    /// Keys the token hash; two independent random keys make 128 bits.
    pub(super) hashers: (RandomState, RandomState),
    pub(super) tokens: DecisionCache<u128, Authn>,
    pub(super) access: DecisionCache<AccessKey, bool>,
    pub(super) token_reviews: AtomicU64,
    pub(super) access_reviews: AtomicU64,
}

impl SharedState {
    pub(super) fn new(allowed_ttl: Duration, denied_ttl: Duration, capacity: usize) -> Self {
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

/// The filter: a tower service in front of the metrics routes.
#[derive(Clone)]
pub(crate) struct Authorized<S> {
    pub(super) inner: S,
    pub(super) auth: Arc<Auth>,
}

pub(super) struct Auth {
    pub(super) client: kube::Client,
    pub(super) timeout: Duration,
    pub(super) shared: Arc<SharedState>,
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

#[cfg(test)]
mod tests {
    use super::*;

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
