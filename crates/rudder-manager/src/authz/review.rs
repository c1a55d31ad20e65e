//! The reviews sent to the API server: a TokenReview for a bearer token, a
//! SubjectAccessReview for a user's verb on a path.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

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

/// What the API server said of a token.
#[derive(Clone, Debug)]
pub(super) enum Authn {
    Authenticated(Arc<UserInfo>),
    Unauthenticated,
}

/// An access decision's key: who, doing what, where.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct AccessKey {
    pub(super) user: String,
    pub(super) uid: Option<String>,
    pub(super) groups: Vec<String>,
    pub(super) extra: BTreeMap<String, Vec<String>>,
    pub(super) verb: String,
    pub(super) path: String,
}

pub(super) async fn review_token(
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
    let answer = create(client, &review, WHAT, timeout).await?;
    let status = answer.status.unwrap_or_default();
    match (status.authenticated, status.user) {
        (Some(true), Some(user)) => Ok(Authn::Authenticated(Arc::new(user))),
        _ => {
            tracing::debug!(error = ?status.error, "metrics bearer token not authenticated");
            Ok(Authn::Unauthenticated)
        }
    }
}

pub(super) async fn review_access(
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
    let answer = create(client, &review, WHAT, timeout).await?;
    let status = answer.status.unwrap_or_default();
    Ok(status.allowed && !status.denied.unwrap_or(false))
}

/// Sends `review` (a cluster-scoped review, answered in its status) and returns the answer,
/// waiting at most `timeout`.
async fn create<R>(
    client: kube::Client,
    review: &R,
    what: &'static str,
    timeout: Duration,
) -> Result<R, ReviewError>
where
    R: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::Serialize
        + k8s_openapi::serde::de::DeserializeOwned,
    R::DynamicType: Default,
{
    let api: Api<R> = Api::all(client);
    tokio::time::timeout(timeout, api.create(&PostParams::default(), review))
        .await
        .map_err(|_| ReviewError::Timeout { what, timeout })?
        .map_err(|source| ReviewError::Api { what, source })
}
