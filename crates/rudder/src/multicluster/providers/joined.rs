//! What the Cluster API and ClusterProfile providers share: two watches on the home cluster
//! joined per member, an object that says whether the member is ready (a `Cluster`, a
//! `ClusterProfile`) and the Secret that holds its kubeconfig; a member is engaged while both
//! say yes.

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use rudder_cache::watch::{self as engine, Event};
use rudder_core::{BoxError, Shutdown};

use super::{config_from_yaml, fingerprint};
use crate::multicluster::provider::Announcer;

/// The two watches of a joined provider and how to read them.
pub(crate) struct Joined {
    pub(crate) client: kube::Client,
    /// One namespace, or every namespace.
    pub(crate) namespace: Option<String>,
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

/// A member's name: `namespace/name` of the object that announces it.
pub(crate) fn member_name(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

impl Joined {
    /// Announces members through `clusters` until `shutdown` fires.
    pub(crate) async fn run(
        self,
        clusters: Announcer,
        shutdown: Shutdown,
        provider: String,
    ) -> Result<(), BoxError> {
        let (objects, secrets): (Api<DynamicObject>, Api<Secret>) = match &self.namespace {
            Some(ns) => (
                Api::namespaced_with(self.client.clone(), ns, &self.resource),
                Api::namespaced(self.client.clone(), ns),
            ),
            None => (
                Api::all_with(self.client.clone(), &self.resource),
                Api::all(self.client.clone()),
            ),
        };
        let mut objects = std::pin::pin!(engine::watch(objects, engine::Config::default()));
        let secret_config = engine::Config::default().labels(&self.secret_selector);
        let mut secrets = std::pin::pin!(engine::watch(secrets, secret_config));
        let mut join = Join {
            spec: &self,
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
    spec: &'a Joined,
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
                let gone: Vec<String> = self
                    .ready
                    .keys()
                    .filter(|member| !listed.contains(*member))
                    .cloned()
                    .collect();
                for member in gone {
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
                crate::multicluster::metrics::provider_error(self.provider);
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
                let gone: Vec<String> = self
                    .secret_members
                    .keys()
                    .filter(|id| !listed.contains(*id))
                    .cloned()
                    .collect();
                for id in gone {
                    self.secret_deleted(&id).await;
                }
            }
            Ok(Event::Apply(secret)) => self.secret_applied(&secret).await,
            Ok(Event::Delete(secret)) => self.secret_deleted(&secret_id(&secret)).await,
            Err(error) => {
                tracing::warn!(%error, provider = %self.provider, "watching kubeconfig Secrets failed; retrying");
                crate::multicluster::metrics::provider_error(self.provider);
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
        let bytes = secret
            .data
            .as_ref()
            .and_then(|data| data.get(&self.spec.key))
            .map(|bytes| bytes.0.clone());
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
        let parsed = match std::str::from_utf8(&bytes) {
            Ok(text) => config_from_yaml(text).await.map_err(|e| e.to_string()),
            Err(e) => Err(format!("not UTF-8: {e}")),
        };
        match parsed {
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
        crate::multicluster::metrics::provider_error(self.provider);
        self.reported.insert(member.to_owned(), print);
    }
}
