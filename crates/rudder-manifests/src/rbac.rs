//! RBAC derived from the code: [`Permissions`] declared (by the `rudder` builders from what a
//! controller watches and owns, or by hand for what a reconciler writes beyond that),
//! resolved against the manager's cache into [`Rules`], rendered as Roles and ClusterRoles.
//!
//! There is no wildcard: a [`Verb`] names one verb, and every rule names its API group and
//! resource. A rule can name the objects it covers too ([`Rules::add_named`], RBAC's
//! `resourceNames`), as the manager's own rules on the objects it keeps do. Rules are merged
//! and ordered, so the same code renders the same objects.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{ApiResource, ObjectMeta};
use rudder_cache::{ApiScope, Cache, Scope, Typed};

/// One verb of the API server's authorizer. There is deliberately no `*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Verb {
    /// Read one object.
    Get,
    /// List objects.
    List,
    /// Watch objects.
    Watch,
    /// Create an object.
    Create,
    /// Replace an object (a `PUT`).
    Update,
    /// Patch an object.
    Patch,
    /// Delete an object.
    Delete,
    /// Delete a collection of objects.
    DeleteCollection,
}

impl Verb {
    /// What an informer needs, and so every read from the cache: list (its paginated lists,
    /// on a server without streaming lists or after falling back to pages) and watch (its
    /// watch, and its streaming lists). It never gets one object.
    pub const INFORMER: [Verb; 2] = [Verb::List, Verb::Watch];
    /// Get, list, watch: an informer's verbs and a `get` from the API server (an `Api::get`,
    /// or [`CREATE_OR_PATCH`](Self::CREATE_OR_PATCH)'s read).
    pub const READ: [Verb; 3] = [Verb::Get, Verb::List, Verb::Watch];
    /// Every write to an object: create, update, patch, delete.
    pub const WRITE: [Verb; 4] = [Verb::Create, Verb::Update, Verb::Patch, Verb::Delete];
    /// What `create_or_patch` of the `rudder` client needs: a get of the object from the API
    /// server, then a create (when it is missing) or a merge patch. A server-side `apply`
    /// needs [`APPLY`](Self::APPLY), a subset. What the controller builder's `owns` records
    /// on an owned type besides its informer's verbs.
    pub const CREATE_OR_PATCH: [Verb; 3] = [Verb::Get, Verb::Create, Verb::Patch];
    /// What `create_or_update` needs: a get, then a create or a replace (`update`).
    pub const CREATE_OR_UPDATE: [Verb; 3] = [Verb::Get, Verb::Create, Verb::Update];
    /// What a server-side apply needs: a patch, which creates the object when it is missing
    /// (and then needs `create` too).
    pub const APPLY: [Verb; 2] = [Verb::Create, Verb::Patch];

    /// The verb as RBAC spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

impl std::fmt::Display for Verb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a resolved rule applies: the whole cluster (a ClusterRole) or one namespace (a Role
/// there).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuleScope {
    /// Every namespace, and cluster-scoped resources.
    Cluster,
    /// One namespace.
    Namespace(String),
}

/// The scopes a declaration resolves to, given the manager's cache.
type ScopesOf = fn(&Cache) -> Vec<Scope>;

#[derive(Clone, Debug)]
enum Place {
    /// Wherever the cache watches a type (one Role per default namespace, or cluster-wide).
    Cache(ScopesOf),
    /// Wherever the cache watches dynamic objects of a resource.
    Dynamic(Box<ApiResource>),
    /// Fixed.
    Fixed(RuleScope),
}

#[derive(Clone, Debug)]
struct Entry {
    place: Place,
    group: String,
    resource: String,
    verbs: BTreeSet<Verb>,
}

/// Permissions an operator needs, as declared; the manager's `record_permissions`
/// resolves them against the manager's cache into [`Rules`].
///
/// The typed methods place a rule where the manager's cache watches the type: in each of
/// its default namespaces when the cache is limited to some (a Role per namespace), or
/// cluster-wide (a ClusterRole) otherwise, and always cluster-wide for a cluster-scoped
/// type. The `rudder` controller builder declares what it sees (`for_`, `owns`,
/// `watches_kind`, the event recorder); a reconciler declares what it writes beyond that
/// with the builder's `permissions`:
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use rudder_manifests::rbac::{Permissions, Verb};
///
/// // Patches ConfigMaps (to add a finalizer) and writes their status.
/// let permissions = Permissions::new()
///     .verbs::<ConfigMap>([Verb::Patch])
///     .subresource::<ConfigMap>("status", [Verb::Patch]);
/// assert!(!permissions.is_empty());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Permissions {
    entries: Vec<Entry>,
}

impl Permissions {
    /// No permissions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.entries.iter().all(|e| e.verbs.is_empty())
    }

    /// `verbs` on `K`, where the cache watches `K`.
    #[must_use]
    pub fn verbs<K: Typed>(self, verbs: impl IntoIterator<Item = Verb>) -> Self {
        self.typed::<K>("", verbs)
    }

    /// Get, list and watch on `K` ([`Verb::READ`]): an informer's verbs, and gets from the
    /// API server.
    #[must_use]
    pub fn read<K: Typed>(self) -> Self {
        self.verbs::<K>(Verb::READ)
    }

    /// List and watch on `K` ([`Verb::INFORMER`]): what the cache's informer of `K` needs,
    /// and so every read of `K` from the cache. What the controller builder records for each
    /// type it watches or reads.
    #[must_use]
    pub fn informer<K: Typed>(self) -> Self {
        self.verbs::<K>(Verb::INFORMER)
    }

    /// `verbs` on the subresource `sub` of `K` (`status`, `finalizers`, `scale`), where the
    /// cache watches `K`.
    #[must_use]
    pub fn subresource<K: Typed>(self, sub: &str, verbs: impl IntoIterator<Item = Verb>) -> Self {
        self.typed::<K>(&format!("/{sub}"), verbs)
    }

    /// Update and patch on `K/status` (`update_status`, `patch_status`).
    #[must_use]
    pub fn status<K: Typed>(self) -> Self {
        self.subresource::<K>("status", [Verb::Update, Verb::Patch])
    }

    /// Create and patch on `events.k8s.io` Events where Events about `K` go: `K`'s
    /// namespaces, or the `default` namespace for a cluster-scoped `K` (what the builder's
    /// event recorder writes).
    #[must_use]
    pub fn events_about<K: Typed>(mut self) -> Self {
        self.entries.push(Entry {
            place: Place::Cache(event_scopes::<K>),
            group: "events.k8s.io".to_owned(),
            resource: "events".to_owned(),
            verbs: [Verb::Create, Verb::Patch].into(),
        });
        self
    }

    /// `verbs` on the dynamic `resource` where the cache watches it (its
    /// [`by_dynamic`](rudder_cache::CacheBuilder::by_dynamic) scope or the default
    /// namespaces: give a cluster-scoped resource [`Scope::all`] there, as its informer needs).
    #[must_use]
    pub fn dynamic(
        mut self,
        resource: &ApiResource,
        verbs: impl IntoIterator<Item = Verb>,
    ) -> Self {
        self.entries.push(Entry {
            place: Place::Dynamic(Box::new(resource.clone())),
            group: resource.group.clone(),
            resource: resource.plural.clone(),
            verbs: verbs.into_iter().collect(),
        });
        self
    }

    /// `verbs` on `resource` (plural, with `/subresource` if any) of API group `group`
    /// (`""` for the core group), in `scope`.
    #[must_use]
    pub fn resource(
        mut self,
        scope: RuleScope,
        group: &str,
        resource: &str,
        verbs: impl IntoIterator<Item = Verb>,
    ) -> Self {
        self.entries.push(Entry {
            place: Place::Fixed(scope),
            group: group.to_owned(),
            resource: resource.to_owned(),
            verbs: verbs.into_iter().collect(),
        });
        self
    }

    /// Adds every permission of `other`.
    #[must_use]
    pub fn and(mut self, other: Permissions) -> Self {
        self.entries.extend(other.entries);
        self
    }

    fn typed<K: Typed>(mut self, suffix: &str, verbs: impl IntoIterator<Item = Verb>) -> Self {
        self.entries.push(Entry {
            place: Place::Cache(type_scopes::<K>),
            group: K::group(&()).into_owned(),
            resource: format!("{}{suffix}", K::plural(&())),
            verbs: verbs.into_iter().collect(),
        });
        self
    }

    /// These permissions placed with `cache`'s scopes.
    pub fn resolve(&self, cache: &Cache) -> Rules {
        let mut rules = Rules::default();
        for entry in &self.entries {
            let scopes = match &entry.place {
                Place::Fixed(scope) => vec![scope.clone()],
                Place::Dynamic(resource) => rule_scopes(cache.default_dynamic_scopes(resource)),
                Place::Cache(of) => rule_scopes(of(cache)),
            };
            for scope in scopes {
                rules.add(
                    scope,
                    &entry.group,
                    &entry.resource,
                    entry.verbs.iter().copied(),
                );
            }
        }
        rules
    }
}

fn type_scopes<K: Typed>(cache: &Cache) -> Vec<Scope> {
    cache.default_scopes::<K>()
}

fn event_scopes<K: Typed>(cache: &Cache) -> Vec<Scope> {
    if <K::Scope as ApiScope>::CLUSTER {
        // kube-runtime's recorder puts Events about cluster-scoped objects in `default`.
        vec![Scope::namespace("default")]
    } else {
        cache.default_scopes::<K>()
    }
}

fn rule_scopes(scopes: Vec<Scope>) -> Vec<RuleScope> {
    let mut out: Vec<RuleScope> = scopes
        .into_iter()
        .map(|s| match s.namespace {
            Some(ns) => RuleScope::Namespace(ns),
            None => RuleScope::Cluster,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Resolved permissions: verbs by (scope, API group, resource, object name), merged and
/// ordered. A rule without a name covers every object of its resource in its scope.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    verbs: BTreeMap<RuleKey, BTreeSet<Verb>>,
}

/// Scope, API group, resource, and the one object's name (`None`: every object).
type RuleKey = (RuleScope, String, String, Option<String>);

impl Rules {
    /// No rules.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether there is no rule.
    pub fn is_empty(&self) -> bool {
        self.verbs.is_empty()
    }

    /// Adds `verbs` on `resource` of `group` in `scope` (nothing for no verbs). A group or
    /// resource with a `*`, or an empty resource, is refused: logged at `error` and left
    /// out, never rendered.
    pub fn add(
        &mut self,
        scope: RuleScope,
        group: &str,
        resource: &str,
        verbs: impl IntoIterator<Item = Verb>,
    ) {
        self.insert(scope, group, resource, None, verbs);
    }

    /// Adds `verbs` on the one object `name` of `resource` of `group` in `scope` (rendered
    /// with `resourceNames`). The API server checks a name only where a request carries one:
    /// `get`, `update`, `patch`, `delete`, and `list` and `watch` selecting
    /// `metadata.name=NAME`; never `create` (whose name is in the body) nor an unselected
    /// `list`, so give those to [`add`](Self::add). An empty name is refused like a
    /// wildcard.
    pub fn add_named(
        &mut self,
        scope: RuleScope,
        group: &str,
        resource: &str,
        name: &str,
        verbs: impl IntoIterator<Item = Verb>,
    ) {
        if name.is_empty() {
            tracing::error!(
                group,
                resource,
                "refusing an RBAC rule with an empty resource name"
            );
            return;
        }
        self.insert(scope, group, resource, Some(name.to_owned()), verbs);
    }

    fn insert(
        &mut self,
        scope: RuleScope,
        group: &str,
        resource: &str,
        name: Option<String>,
        verbs: impl IntoIterator<Item = Verb>,
    ) {
        let verbs: BTreeSet<Verb> = verbs.into_iter().collect();
        if verbs.is_empty() {
            return;
        }
        // No wildcard ever: a `*` in a group or resource (only `Permissions::resource` and
        // this method take free text) is refused, loudly, rather than rendered.
        if group.contains('*') || resource.contains('*') || resource.is_empty() {
            tracing::error!(
                group,
                resource,
                "refusing an RBAC rule with a wildcard or no resource; name the resource"
            );
            return;
        }
        self.verbs
            .entry((scope, group.to_owned(), resource.to_owned(), name))
            .or_default()
            .extend(verbs);
    }

    /// Adds every rule of `other`.
    pub fn merge(&mut self, other: &Rules) {
        for ((scope, group, resource, name), verbs) in &other.verbs {
            self.insert(
                scope.clone(),
                group,
                resource,
                name.clone(),
                verbs.iter().copied(),
            );
        }
    }

    /// Whether `verb` on every object of `resource` of `group` is allowed in `scope` (a
    /// cluster-wide rule allows it in every namespace too); rules naming objects do not
    /// count, see [`allows_named`](Self::allows_named).
    pub fn allows(&self, scope: &RuleScope, group: &str, resource: &str, verb: Verb) -> bool {
        self.has(scope, group, resource, None, verb)
    }

    /// Whether `verb` on the object `name` of `resource` of `group` is allowed in `scope`:
    /// by a rule naming it, or one covering every object.
    pub fn allows_named(
        &self,
        scope: &RuleScope,
        group: &str,
        resource: &str,
        name: &str,
        verb: Verb,
    ) -> bool {
        self.has(scope, group, resource, Some(name), verb)
            || self.allows(scope, group, resource, verb)
    }

    fn has(
        &self,
        scope: &RuleScope,
        group: &str,
        resource: &str,
        name: Option<&str>,
        verb: Verb,
    ) -> bool {
        let has = |scope: &RuleScope| {
            let key = (
                scope.clone(),
                group.to_owned(),
                resource.to_owned(),
                name.map(str::to_owned),
            );
            self.verbs.get(&key).is_some_and(|v| v.contains(&verb))
        };
        has(scope) || has(&RuleScope::Cluster)
    }

    /// The scopes with rules: the cluster first (if any), then namespaces in order.
    pub fn scopes(&self) -> Vec<RuleScope> {
        let mut scopes: Vec<RuleScope> = self.verbs.keys().map(|(s, _, _, _)| s.clone()).collect();
        scopes.dedup();
        scopes
    }

    /// The policy rules of `scope`: resources of one API group with the same verbs (and, for
    /// rules naming objects, the same names) share a rule; ordered by group, resources, then
    /// names. A rule's `resourceNames` apply to every resource in it, so resources are only
    /// put together when they name the same objects with the same verbs.
    pub fn policy_rules(&self, scope: &RuleScope) -> Vec<PolicyRule> {
        // The names each (group, resource, verbs) covers; an empty list for every object.
        let mut named: BTreeMap<(String, String, Vec<Verb>), Vec<String>> = BTreeMap::new();
        for ((s, group, resource, name), verbs) in &self.verbs {
            if s == scope {
                let names = named
                    .entry((
                        group.clone(),
                        resource.clone(),
                        verbs.iter().copied().collect(),
                    ))
                    .or_default();
                if let Some(name) = name {
                    names.push(name.clone());
                }
            }
        }
        // Where one verb set covers every object and some named ones too, the names add
        // nothing: the wider rule is rendered alone.
        let mut unnamed: BTreeSet<(String, String, Vec<Verb>)> = BTreeSet::new();
        for ((s, group, resource, name), verbs) in &self.verbs {
            if s == scope && name.is_none() {
                unnamed.insert((
                    group.clone(),
                    resource.clone(),
                    verbs.iter().copied().collect(),
                ));
            }
        }
        let mut grouped: BTreeMap<(String, Vec<Verb>, Vec<String>), Vec<String>> = BTreeMap::new();
        for ((group, resource, verbs), names) in named {
            let key = (group, resource, verbs);
            let names = if unnamed.contains(&key) {
                Vec::new()
            } else {
                names
            };
            let (group, resource, verbs) = key;
            grouped
                .entry((group, verbs, names))
                .or_default()
                .push(resource);
        }
        let mut rules: Vec<PolicyRule> = grouped
            .into_iter()
            .map(|((group, verbs, names), resources)| PolicyRule {
                api_groups: Some(vec![group]),
                resources: Some(resources),
                resource_names: (!names.is_empty()).then_some(names),
                verbs: verbs.iter().map(|v| v.as_str().to_owned()).collect(),
                ..PolicyRule::default()
            })
            .collect();
        rules.sort_by(|a, b| {
            (
                a.api_groups.as_ref(),
                a.resources.as_ref(),
                a.resource_names.as_ref(),
            )
                .cmp(&(
                    b.api_groups.as_ref(),
                    b.resources.as_ref(),
                    b.resource_names.as_ref(),
                ))
        });
        rules
    }

    /// The Roles, ClusterRole and bindings granting these rules to the ServiceAccount
    /// `service_account` in `namespace`, all named `name`: a ClusterRole and
    /// ClusterRoleBinding for the cluster-wide rules (if any), a Role and RoleBinding in each
    /// namespace with rules.
    pub fn render(&self, name: &str, service_account: &str, namespace: &str) -> RbacObjects {
        let subject = Subject {
            kind: "ServiceAccount".to_owned(),
            name: service_account.to_owned(),
            namespace: Some(namespace.to_owned()),
            ..Subject::default()
        };
        let role_ref = |kind: &str| RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: kind.to_owned(),
            name: name.to_owned(),
        };
        let meta = |ns: Option<&str>| ObjectMeta {
            name: Some(name.to_owned()),
            namespace: ns.map(str::to_owned),
            ..ObjectMeta::default()
        };
        let mut objects = RbacObjects::default();
        for scope in self.scopes() {
            let rules = self.policy_rules(&scope);
            match &scope {
                RuleScope::Cluster => {
                    objects.cluster_role = Some(ClusterRole {
                        metadata: meta(None),
                        rules: Some(rules),
                        ..ClusterRole::default()
                    });
                    objects.cluster_role_binding = Some(ClusterRoleBinding {
                        metadata: meta(None),
                        role_ref: role_ref("ClusterRole"),
                        subjects: Some(vec![subject.clone()]),
                    });
                }
                RuleScope::Namespace(ns) => {
                    objects.roles.push(Role {
                        metadata: meta(Some(ns)),
                        rules: Some(rules),
                    });
                    objects.role_bindings.push(RoleBinding {
                        metadata: meta(Some(ns)),
                        role_ref: role_ref("Role"),
                        subjects: Some(vec![subject.clone()]),
                    });
                }
            }
        }
        objects
    }
}

/// The RBAC objects [`Rules::render`] makes.
#[derive(Clone, Debug, Default)]
pub struct RbacObjects {
    /// The cluster-wide rules, if any.
    pub cluster_role: Option<ClusterRole>,
    /// Binds [`cluster_role`](Self::cluster_role) to the ServiceAccount.
    pub cluster_role_binding: Option<ClusterRoleBinding>,
    /// One Role per namespace with rules, in namespace order.
    pub roles: Vec<Role>,
    /// One RoleBinding per Role, in the same order.
    pub role_bindings: Vec<RoleBinding>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};

    fn cache(namespaces: &[&str]) -> Cache {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        Cache::builder(client)
            .default_namespaces(namespaces.iter().copied())
            .build(&tokio_util::sync::CancellationToken::new())
    }

    #[tokio::test]
    async fn typed_rules_follow_the_caches_namespaces() {
        let permissions = Permissions::new()
            .read::<Pod>()
            .verbs::<Pod>([Verb::Create])
            .status::<Pod>()
            .read::<Namespace>()
            .events_about::<Pod>();
        let all = permissions.resolve(&cache(&[]));
        assert_eq!(all.scopes(), vec![RuleScope::Cluster]);
        let rules = all.policy_rules(&RuleScope::Cluster);
        let pods = rules
            .iter()
            .find(|r| r.resources.as_deref() == Some(&["pods".to_owned()][..]))
            .unwrap();
        assert_eq!(pods.verbs, ["get", "list", "watch", "create"]);

        let two = permissions.resolve(&cache(&["b", "a"]));
        assert_eq!(
            two.scopes(),
            vec![
                RuleScope::Cluster,
                RuleScope::Namespace("a".into()),
                RuleScope::Namespace("b".into())
            ]
        );
        // Namespaces are cluster-scoped: the only cluster-wide rule.
        let cluster = two.policy_rules(&RuleScope::Cluster);
        assert_eq!(cluster.len(), 1);
        assert_eq!(
            cluster[0].resources.as_deref(),
            Some(&["namespaces".to_owned()][..])
        );
        assert!(two.allows(
            &RuleScope::Namespace("a".into()),
            "",
            "pods/status",
            Verb::Patch
        ));
        assert!(!two.allows(&RuleScope::Namespace("c".into()), "", "pods", Verb::Get));
        assert!(two.allows(
            &RuleScope::Namespace("b".into()),
            "events.k8s.io",
            "events",
            Verb::Create
        ));
    }

    #[tokio::test]
    async fn rules_merge_deterministically_and_never_hold_a_wildcard() {
        let a = Permissions::new()
            .verbs::<ConfigMap>([Verb::Patch, Verb::Get])
            .read::<Pod>()
            .resolve(&cache(&[]));
        let b = Permissions::new()
            .read::<Pod>()
            .verbs::<ConfigMap>([Verb::Get, Verb::Patch])
            .resolve(&cache(&[]));
        assert_eq!(a, b);
        let objects = a.render("op", "op", "op-system");
        let role = objects.cluster_role.unwrap();
        let yaml = serde_json::to_string(&role).unwrap();
        assert!(!yaml.contains('*'), "{yaml}");
        let rules = role.rules.unwrap();
        // Same group: ConfigMaps (get, patch) and Pods (get, list, watch) in two rules.
        assert_eq!(rules.len(), 2);
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["configmaps".to_owned()][..])
        );
        assert_eq!(rules[0].verbs, ["get", "patch"]);
        assert!(objects.roles.is_empty());
        let binding = objects.cluster_role_binding.unwrap();
        assert_eq!(binding.role_ref.kind, "ClusterRole");
        assert_eq!(
            binding.subjects.unwrap()[0].namespace.as_deref(),
            Some("op-system")
        );
    }

    #[test]
    fn named_rules_render_resource_names_and_cover_only_their_objects() {
        let mut rules = Rules::new();
        let ns = RuleScope::Namespace("ops".into());
        rules.add(ns.clone(), "", "secrets", [Verb::Create]);
        rules.add_named(
            ns.clone(),
            "",
            "secrets",
            "certs",
            [Verb::Get, Verb::Update],
        );
        let group = "admissionregistration.k8s.io";
        for (resource, name) in [
            ("mutatingwebhookconfigurations", "op-mutating"),
            ("validatingwebhookconfigurations", "op-validating"),
            ("validatingwebhookconfigurations", "op-extra"),
        ] {
            rules.add_named(RuleScope::Cluster, group, resource, name, [Verb::Update]);
        }
        // A name covered by a rule for every object with the same verbs adds nothing.
        rules.add(ns.clone(), "", "configmaps", [Verb::Get]);
        rules.add_named(ns.clone(), "", "configmaps", "one", [Verb::Get]);
        rules.add_named(ns.clone(), "", "configmaps", "", [Verb::Delete]);

        assert!(rules.allows(&ns, "", "secrets", Verb::Create));
        assert!(!rules.allows(&ns, "", "secrets", Verb::Get));
        assert!(rules.allows_named(&ns, "", "secrets", "certs", Verb::Get));
        assert!(!rules.allows_named(&ns, "", "secrets", "other", Verb::Get));
        assert!(rules.allows_named(&ns, "", "secrets", "other", Verb::Create));
        assert!(!rules.allows_named(&ns, "", "configmaps", "", Verb::Delete));

        let namespaced = serde_json::to_value(rules.policy_rules(&ns)).unwrap();
        assert_eq!(
            namespaced,
            serde_json::json!([
                { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"] },
                { "apiGroups": [""], "resources": ["secrets"], "verbs": ["create"] },
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": ["certs"],
                    "verbs": ["get", "update"],
                },
            ])
        );
        // Resources naming different objects are kept apart: a rule's names apply to all
        // of its resources.
        let cluster = serde_json::to_value(rules.policy_rules(&RuleScope::Cluster)).unwrap();
        assert_eq!(
            cluster,
            serde_json::json!([
                {
                    "apiGroups": [group],
                    "resources": ["mutatingwebhookconfigurations"],
                    "resourceNames": ["op-mutating"],
                    "verbs": ["update"],
                },
                {
                    "apiGroups": [group],
                    "resources": ["validatingwebhookconfigurations"],
                    "resourceNames": ["op-extra", "op-validating"],
                    "verbs": ["update"],
                },
            ])
        );
        let mut merged = Rules::new();
        merged.merge(&rules);
        assert_eq!(merged, rules);
    }

    #[test]
    fn a_wildcard_resource_or_group_is_refused() {
        let mut rules = Rules::new();
        rules.add(RuleScope::Cluster, "*", "pods", [Verb::Get]);
        rules.add(RuleScope::Cluster, "", "*", [Verb::Get]);
        rules.add(RuleScope::Cluster, "", "pods/*", [Verb::Get]);
        rules.add(RuleScope::Cluster, "", "", [Verb::Get]);
        assert!(rules.is_empty());
        rules.add(RuleScope::Cluster, "", "pods", [Verb::Get]);
        assert!(!rules.is_empty());
    }

    #[tokio::test]
    async fn dynamic_and_fixed_rules() {
        let resource = ApiResource::erase::<ConfigMap>(&());
        let rules = Permissions::new()
            .dynamic(&resource, Verb::READ)
            .resource(
                RuleScope::Namespace("x".into()),
                "coordination.k8s.io",
                "leases",
                [Verb::Get],
            )
            .resolve(&cache(&["n"]));
        assert!(rules.allows(
            &RuleScope::Namespace("n".into()),
            "",
            "configmaps",
            Verb::Watch
        ));
        assert!(!rules.allows(&RuleScope::Cluster, "", "configmaps", Verb::Watch));
        assert!(rules.allows(
            &RuleScope::Namespace("x".into()),
            "coordination.k8s.io",
            "leases",
            Verb::Get
        ));
    }
}
