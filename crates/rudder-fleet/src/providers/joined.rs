//! What the Cluster API and ClusterProfile providers share: their builders' half
//! ([`JoinedScope`]: the client, the namespace or all of them, the provider's name and
//! permissions, and the run), and two watches on the home cluster joined per member, an object
//! that says whether the member is ready (a `Cluster`, a `ClusterProfile`) and the Secret that
//! holds its kubeconfig; a member is engaged while both say yes. Each provider keeps only what
//! differs: its resource, what makes an object ready, which Secrets hold the kubeconfig.

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use rudder_cache::watch::{self as engine, Event};
use rudder_core::{BoxError, Shutdown};
use rudder_manager::rbac::{Permissions, RuleScope, Verb};

use super::{config_from_bytes, fingerprint, kubeconfig_bytes, unlisted};
use crate::provider::Announcer;

/// A joined provider's builder half: where it watches, and with which client.
#[derive(Clone)]
pub(crate) struct JoinedScope {
    /// The client given, or the manager's once the fleet is built.
    pub(crate) client: Option<kube::Client>,
    /// One namespace, or every namespace.
    pub(crate) namespace: Option<String>,
}

impl JoinedScope {
    /// In `namespace` (`None`: every namespace), with the manager's client.
    pub(crate) fn new(namespace: Option<String>) -> Self {
        Self {
            client: None,
            namespace,
        }
    }

    /// The client given, else `home`.
    pub(crate) fn resolve_client(&mut self, home: &kube::Client) {
        if self.client.is_none() {
            self.client = Some(home.clone());
        }
    }

    /// The provider's name: `prefix` and the namespace, or `prefix all namespaces`.
    pub(crate) fn name(&self, prefix: &str) -> String {
        match &self.namespace {
            Some(ns) => format!("{prefix} {ns}"),
            None => format!("{prefix} all namespaces"),
        }
    }

    /// Reading `resource` (its group and plural) and Secrets, where the provider watches.
    pub(crate) fn permissions(&self, resource: &ApiResource) -> Permissions {
        let scope = self
            .namespace
            .clone()
            .map_or(RuleScope::Cluster, RuleScope::Namespace);
        let read = [Verb::Get, Verb::List, Verb::Watch];
        Permissions::new()
            .resource(scope.clone(), &resource.group, &resource.plural, read)
            .resource(scope, "", "secrets", read)
    }

    /// Runs the joined watches of `kind` as the provider named `provider`, announcing members
    /// through `clusters` until `shutdown` fires; `who` names the provider in the error for a
    /// provider run without a client.
    pub(crate) fn run(
        &self,
        kind: JoinedKind,
        who: &'static str,
        provider: String,
        clusters: Announcer,
        shutdown: Shutdown,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        let client = self.client.clone();
        let namespace = self.namespace.clone();
        Box::pin(async move {
            let Some(client) = client else {
                return Err(format!("the {who} provider has no client").into());
            };
            Joined {
                client,
                namespace,
                kind,
            }
            .run(clusters, shutdown, provider)
            .await
        })
    }
}

/// What differs between joined providers: the kind whose objects say which members exist and
/// whether each is ready, and the Secrets that hold their kubeconfigs.
pub(crate) struct JoinedKind {
    /// The kind whose objects say which members exist and whether each is ready.
    pub(crate) resource: ApiResource,
    /// The kind's name in logs ("Cluster API Clusters").
    pub(crate) what: &'static str,
    /// Whether an object's member should be engaged (credentials aside).
    pub(crate) ready: fn(&DynamicObject) -> bool,
    /// The label selector of the Secrets that may hold kubeconfigs.
    pub(crate) secret_selector: String,
    /// The member a Secret is for (`namespace/name`), if any.
    pub(crate) secret_member: fn(&Secret) -> Option<String>,
    /// The Secret's data key of the kubeconfig.
    pub(crate) key: String,
}

/// The two watches of a joined provider and how to read them.
struct Joined {
    client: kube::Client,
    /// One namespace, or every namespace.
    namespace: Option<String>,
    kind: JoinedKind,
}

/// A member's name: `namespace/name` of the object that announces it.
pub(crate) fn member_name(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

impl Joined {
    /// Announces members through `clusters` until `shutdown` fires.
    async fn run(
        self,
        clusters: Announcer,
        shutdown: Shutdown,
        provider: String,
    ) -> Result<(), BoxError> {
        let (objects, secrets): (Api<DynamicObject>, Api<Secret>) = match &self.namespace {
            Some(ns) => (
                Api::namespaced_with(self.client.clone(), ns, &self.kind.resource),
                Api::namespaced(self.client.clone(), ns),
            ),
            None => (
                Api::all_with(self.client.clone(), &self.kind.resource),
                Api::all(self.client.clone()),
            ),
        };
        let mut objects = std::pin::pin!(engine::watch(objects, engine::Config::default()));
        let secret_config = engine::Config::default().labels(&self.kind.secret_selector);
        let mut secrets = std::pin::pin!(engine::watch(secrets, secret_config));
        let mut join = Join {
            spec: &self.kind,
            clusters: &clusters,
            provider: &provider,
            ready: HashMap::new(),
            secrets: BTreeMap::new(),
            secret_members: HashMap::new(),
            announced: HashMap::new(),
            reported: HashMap::new(),
            listed_objects: HashSet::new(),
            listed_secrets: HashSet::new(),
        };
        loop {
            tokio::select! {
                event = objects.next() => match event {
                    Some(event) => join.object_event(event).await,
                    None => return Ok(()),
                },
                event = secrets.next() => match event {
                    Some(event) => join.secret_event(event).await,
                    None => return Ok(()),
                },
                _ = shutdown.stopped() => return Ok(()),
            }
        }
    }
}

/// The member an object announces.
fn object_member(object: &DynamicObject) -> Option<String> {
    let name = object.metadata.name.as_deref()?;
    Some(member_name(object.metadata.namespace.as_deref(), name))
}

/// A Secret's `namespace/name`.
fn secret_id(secret: &Secret) -> String {
    member_name(
        secret.metadata.namespace.as_deref(),
        secret.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The state of both watches, and what was announced.
struct Join<'a> {
    spec: &'a JoinedKind,
    clusters: &'a Announcer,
    provider: &'a str,
    /// Per member with an object: whether the object says it is ready.
    ready: HashMap<String, bool>,
    /// Per (member, Secret): the kubeconfig under the key, `None` when the key is missing.
    secrets: BTreeMap<(String, String), Option<Vec<u8>>>,
    /// Per Secret: the member it is for now.
    secret_members: HashMap<String, String>,
    /// Per announced member: the fingerprint of the kubeconfig it was announced with.
    announced: HashMap<String, u64>,
    /// Per member: the fingerprint of the bad input last reported, so that each version is
    /// logged and counted once.
    reported: HashMap<String, u64>,
    /// The members the objects' relist in progress has listed.
    listed_objects: HashSet<String>,
    /// The Secrets the Secrets' relist in progress has listed.
    listed_secrets: HashSet<String>,
}

/// A member's credentials, as its Secrets give them.
enum Credentials {
    None,
    Kubeconfig(Vec<u8>),
    /// Unusable, and why.
    Bad(String, u64),
}

impl Join<'_> {
    /// Follows one event of the objects' watch.
    async fn object_event(&mut self, event: Result<Event<DynamicObject>, engine::Error>) {
        match event {
            Ok(Event::Init) => self.listed_objects.clear(),
            Ok(Event::InitApply(object)) => {
                if let Some(member) = object_member(&object) {
                    self.listed_objects.insert(member);
                }
                self.object_applied(&object).await;
            }
            Ok(Event::InitDone) => {
                let listed = std::mem::take(&mut self.listed_objects);
                for member in unlisted(&self.ready, &listed) {
                    self.object_deleted(&member).await;
                }
            }
            Ok(Event::Apply(object)) => self.object_applied(&object).await,
            Ok(Event::Delete(object)) => {
                if let Some(member) = object_member(&object) {
                    self.object_deleted(&member).await;
                }
            }
            Err(error) => {
                // The engine retries with its backoff; members stay as they are.
                tracing::warn!(%error, provider = %self.provider, "watching {} failed (is the CRD installed, and may the operator list it?); retrying", self.spec.what);
                crate::metrics::provider_error(self.provider);
            }
        }
    }

    /// Follows one event of the Secrets' watch.
    async fn secret_event(&mut self, event: Result<Event<Secret>, engine::Error>) {
        match event {
            Ok(Event::Init) => self.listed_secrets.clear(),
            Ok(Event::InitApply(secret)) => {
                self.listed_secrets.insert(secret_id(&secret));
                self.secret_applied(&secret).await;
            }
            Ok(Event::InitDone) => {
                let listed = std::mem::take(&mut self.listed_secrets);
                for id in unlisted(&self.secret_members, &listed) {
                    self.secret_deleted(&id).await;
                }
            }
            Ok(Event::Apply(secret)) => self.secret_applied(&secret).await,
            Ok(Event::Delete(secret)) => self.secret_deleted(&secret_id(&secret)).await,
            Err(error) => {
                tracing::warn!(%error, provider = %self.provider, "watching kubeconfig Secrets failed; retrying");
                crate::metrics::provider_error(self.provider);
            }
        }
    }

    async fn object_applied(&mut self, object: &DynamicObject) {
        let Some(member) = object_member(object) else {
            return;
        };
        let ready = (self.spec.ready)(object);
        if self.ready.insert(member.clone(), ready) != Some(ready) {
            self.settle(&member).await;
        }
    }

    async fn object_deleted(&mut self, member: &str) {
        if self.ready.remove(member).is_some() {
            self.settle(member).await;
        }
    }

    async fn secret_applied(&mut self, secret: &Secret) {
        let id = secret_id(secret);
        let Some(member) = (self.spec.secret_member)(secret) else {
            // No longer for any member (a label changed): as if deleted.
            self.secret_deleted(&id).await;
            return;
        };
        let bytes = kubeconfig_bytes(secret, &self.spec.key);
        let before = self.secret_members.insert(id.clone(), member.clone());
        if let Some(before) = before.filter(|before| *before != member) {
            self.secrets.remove(&(before.clone(), id.clone()));
            self.settle(&before).await;
        }
        let key = (member.clone(), id);
        if self.secrets.get(&key) != Some(&bytes) {
            self.secrets.insert(key, bytes);
            self.settle(&member).await;
        }
    }

    async fn secret_deleted(&mut self, id: &str) {
        if let Some(member) = self.secret_members.remove(id) {
            self.secrets.remove(&(member.clone(), id.to_owned()));
            self.settle(&member).await;
        }
    }

    /// What `member`'s Secrets give.
    fn credentials(&self, member: &str) -> Credentials {
        let mut found = self
            .secrets
            .range((member.to_owned(), String::new())..)
            .take_while(|((m, _), _)| m == member);
        let Some(((_, first), bytes)) = found.next() else {
            return Credentials::None;
        };
        let rest: Vec<&str> = found.map(|((_, id), _)| id.as_str()).collect();
        if !rest.is_empty() {
            let names = format!("{first}, {}", rest.join(", "));
            let print = fingerprint(names.as_bytes());
            return Credentials::Bad(
                format!("several kubeconfig Secrets are for it ({names}); expected one"),
                print,
            );
        }
        match bytes {
            Some(bytes) => Credentials::Kubeconfig(bytes.clone()),
            None => Credentials::Bad(
                format!(
                    "its kubeconfig Secret {first} has no key {:?}",
                    self.spec.key
                ),
                fingerprint(first.as_bytes()),
            ),
        }
    }

    /// Announces or withdraws `member` as its object and Secrets now say.
    async fn settle(&mut self, member: &str) {
        let ready = self.ready.get(member).copied().unwrap_or(false);
        let credentials = if ready {
            self.credentials(member)
        } else {
            Credentials::None
        };
        let bytes = match credentials {
            Credentials::None => {
                self.reported.remove(member);
                if self.announced.remove(member).is_some() {
                    self.clusters.disengage(member);
                }
                return;
            }
            Credentials::Bad(reason, print) => {
                self.report(member, print, &reason);
                return;
            }
            Credentials::Kubeconfig(bytes) => bytes,
        };
        let print = fingerprint(&bytes);
        if self.announced.get(member) == Some(&print) {
            return;
        }
        match config_from_bytes(&bytes).await {
            Ok(config) => {
                self.clusters.engage(member, config);
                self.announced.insert(member.to_owned(), print);
                self.reported.remove(member);
            }
            Err(error) => {
                self.report(
                    member,
                    print,
                    &format!("its kubeconfig does not parse: {error}"),
                );
            }
        }
    }

    /// Logs and counts bad input for `member` once per version; the member is left as it was.
    fn report(&mut self, member: &str, print: u64, reason: &str) {
        if self.reported.get(member) == Some(&print) {
            return;
        }
        tracing::warn!(cluster = %member, provider = %self.provider, "a member's credentials are unusable, {reason}; the cluster is left as it was");
        crate::metrics::provider_error(self.provider);
        self.reported.insert(member.to_owned(), print);
    }
}
