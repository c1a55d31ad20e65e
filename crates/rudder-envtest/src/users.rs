//! Extra users: [`TestUser`], a ServiceAccount with a token from the TokenRequest API and a
//! client acting as it; grants of non-resource URLs (`/metrics`) to one; and waiting until the
//! authorizer allows or refuses one a resource verb.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::error::{Error, Result};
use crate::namespace::TestNamespace;
use crate::poll::POLL_INTERVAL;

/// How long a service account token asked for by [`TestNamespace::service_account`] lives:
/// longer than any test.
pub const TEST_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// How long [`TestNamespace::grant_non_resource_urls`] waits for the API server's RBAC
/// authorizer to see a new binding.
pub const GRANT_TIMEOUT: Duration = Duration::from_secs(30);

/// A user the API server authenticates other than the admin: a ServiceAccount in a test
/// namespace, with a bearer token and a client that sends it.
///
/// The token comes from the TokenRequest API (`serviceaccounts/<name>/token`), which the
/// control plane serves because it runs with `--service-account-issuer` and the signing key;
/// no controller manager is needed (the legacy token Secrets are not used). Service
/// accounts rather than extra static token-file entries, because a test can make as many as
/// it needs at any time on the shared control plane, each named after the test, and they are
/// the kind of user (Prometheus' service account, an operator's) the tests stand in for.
/// The user has no permissions until granted some (RBAC), apart from what every
/// authenticated user has (discovery, `/version`, `/healthz`).
#[derive(Clone)]
pub struct TestUser {
    namespace: String,
    name: String,
    token: String,
    client: kube::Client,
}

impl std::fmt::Debug for TestUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestUser")
            .field("username", &self.username())
            .finish_non_exhaustive()
    }
}

impl TestUser {
    /// The user name the API server knows it by:
    /// `system:serviceaccount:<namespace>:<name>`.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// The ServiceAccount's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ServiceAccount's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The bearer token (valid for [`TEST_TOKEN_LIFETIME`]; audience: the API server's).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A client acting as this user, whose default namespace is the user's.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }
}

impl TestNamespace {
    /// Creates the ServiceAccount `name` in this namespace, asks the TokenRequest API for a
    /// token of it, and returns the user with a client acting as it (built on the current
    /// runtime).
    ///
    /// # Errors
    ///
    /// [`Error::Kube`] if the ServiceAccount cannot be created (it exists already, say), the
    /// token not issued, or the client not built.
    pub async fn service_account(&self, name: &str) -> Result<TestUser> {
        let accounts: Api<ServiceAccount> = self.api();
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        let context = |what: &str| format!("{what} service account {}/{name}", self.name());
        accounts
            .create(&PostParams::default(), &account)
            .await
            .map_err(|source| Error::Kube {
                context: context("create"),
                source,
            })?;
        // Built from JSON: these types' fields differ between Kubernetes versions' types.
        // No audiences: the API server's own, so it authenticates the token.
        let request: TokenRequest = from_json(serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": { "expirationSeconds": TEST_TOKEN_LIFETIME.as_secs() },
        }))?;
        let issued = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .map_err(|source| Error::Kube {
                context: context("request a token for"),
                source,
            })?;
        let token = serde_json::to_value(&issued)
            .ok()
            .and_then(|issued| issued.pointer("/status/token")?.as_str().map(str::to_owned))
            .unwrap_or_default();
        let mut config = self.config.clone();
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.as_str().into()),
            ..kube::config::AuthInfo::default()
        };
        let client = kube::Client::try_from(config).map_err(|source| Error::Kube {
            context: "build a client".to_owned(),
            source,
        })?;
        Ok(TestUser {
            namespace: self.name().to_owned(),
            name: name.to_owned(),
            token,
            client,
        })
    }

    /// Lets `user` use `verbs` on the non-resource URLs `urls` (`["get"]` on `["/metrics"]`,
    /// say): a ClusterRole and a ClusterRoleBinding, both named
    /// `<namespace>-<user>-non-resource`, and returns once the API server's authorizer
    /// allows the first verb on the first URL (RBAC changes reach it shortly after the write).
    ///
    /// # Errors
    ///
    /// [`Error::Kube`] if the role or binding cannot be created, or a check fails;
    /// [`Error::NotAuthorized`] if the grant has no effect within [`GRANT_TIMEOUT`].
    pub async fn grant_non_resource_urls(
        &self,
        user: &TestUser,
        verbs: &[&str],
        urls: &[&str],
    ) -> Result<()> {
        let name = format!("{}-{}-non-resource", self.name(), user.name());
        let role: ClusterRole = from_json(serde_json::json!({
            "metadata": { "name": name },
            "rules": [{ "nonResourceURLs": urls, "verbs": verbs }],
        }))?;
        let binding: ClusterRoleBinding = from_json(serde_json::json!({
            "metadata": { "name": name },
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{
                "kind": "ServiceAccount",
                "name": user.name(),
                "namespace": user.namespace(),
            }],
        }))?;
        let client = self.client();
        Api::<ClusterRole>::all(client.clone())
            .create(&PostParams::default(), &role)
            .await
            .map_err(|source| Error::Kube {
                context: format!("create cluster role {name}"),
                source,
            })?;
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .map_err(|source| Error::Kube {
                context: format!("create cluster role binding {name}"),
                source,
            })?;
        let (Some(verb), Some(url)) = (verbs.first(), urls.first()) else {
            return Ok(());
        };
        let review = review_for(
            user,
            Some(NonResourceAttributes {
                path: Some((*url).to_owned()),
                verb: Some((*verb).to_owned()),
            }),
            None,
        );
        wait_for_answer(&client, user, &review, true, &format!("{verb} {url}")).await
    }
}

impl TestNamespace {
    /// Waits until the API server's authorizer answers `allowed` for `user` doing `verb` on
    /// `resource` (plural, with `/subresource` if any) of API `group` (`""` for the core
    /// group) in this namespace: RBAC changes (a Role applied, replaced or deleted) reach the
    /// authorizer shortly after the write, and a test acting as the user must not run ahead
    /// of them.
    ///
    /// # Errors
    ///
    /// [`Error::Kube`] if a review fails; [`Error::NotAuthorized`] if the answer is still
    /// the other one after [`GRANT_TIMEOUT`].
    pub async fn wait_for_access(
        &self,
        user: &TestUser,
        verb: &str,
        group: &str,
        resource: &str,
        allowed: bool,
    ) -> Result<()> {
        self.wait_for_object_access(user, verb, group, resource, None, allowed)
            .await
    }

    /// [`wait_for_access`](Self::wait_for_access) on the one object `name` when given: what
    /// a rule scoped by `resourceNames` grants (a review without a name is refused by it).
    ///
    /// # Errors
    ///
    /// As [`wait_for_access`](Self::wait_for_access).
    pub async fn wait_for_object_access(
        &self,
        user: &TestUser,
        verb: &str,
        group: &str,
        resource: &str,
        name: Option<&str>,
        allowed: bool,
    ) -> Result<()> {
        let (resource, subresource) = match resource.split_once('/') {
            Some((resource, sub)) => (resource, Some(sub.to_owned())),
            None => (resource, None),
        };
        let attributes = ResourceAttributes {
            namespace: Some(self.name().to_owned()),
            verb: Some(verb.to_owned()),
            group: Some(group.to_owned()),
            resource: Some(resource.to_owned()),
            subresource,
            name: name.map(str::to_owned),
            ..ResourceAttributes::default()
        };
        let review = review_for(user, None, Some(attributes));
        let what = match name {
            Some(name) => format!("{verb} {group}/{resource} {name} in {}", self.name()),
            None => format!("{verb} {group}/{resource} in {}", self.name()),
        };
        let what = if allowed {
            what
        } else {
            format!("be refused {what}")
        };
        wait_for_answer(&self.client(), user, &review, allowed, &what).await
    }
}

/// A review of what `user` may do (with the groups every ServiceAccount has).
fn review_for(
    user: &TestUser,
    non_resource: Option<NonResourceAttributes>,
    resource: Option<ResourceAttributes>,
) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.username()),
            groups: Some(vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{}", user.namespace()),
                "system:authenticated".to_owned(),
            ]),
            extra: Some(BTreeMap::new()),
            non_resource_attributes: non_resource,
            resource_attributes: resource,
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

/// Asks the API server's authorizer `review` until its answer is `allowed`, polling for up
/// to [`GRANT_TIMEOUT`]; `what` names the access in errors.
async fn wait_for_answer(
    client: &kube::Client,
    user: &TestUser,
    review: &SubjectAccessReview,
    allowed: bool,
    what: &str,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + GRANT_TIMEOUT;
    loop {
        let answer = Api::<SubjectAccessReview>::all(client.clone())
            .create(&PostParams::default(), review)
            .await
            .map_err(|source| Error::Kube {
                context: format!("ask the authorizer about {} ({what})", user.username()),
                source,
            })?;
        if answer.status.is_some_and(|s| s.allowed) == allowed {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::NotAuthorized {
                user: user.username(),
                allowed,
                what: what.to_owned(),
                timeout: GRANT_TIMEOUT,
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// An object from its JSON form.
fn from_json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T> {
    serde_json::from_value(value).map_err(|source| Error::Kube {
        context: "build a request".to_owned(),
        source: kube::Error::SerdeError(source),
    })
}
