//! RBAC derived from the code: the vocabulary ([`Permissions`], [`Rules`], [`Verb`], ...)
//! lives in [`rudder_manifests::rbac`] and is re-exported here; this module adds the
//! manager's own rules (its Lease, secure metrics' reviews, the self-signed certificates)
//! and [`DeclaredReads`], the check of a cached read against what was declared.

use std::sync::{Arc, Mutex};

use rudder_cache::{Cache, Scope, Typed};
use rudder_core::sync::LockExt;

pub use rudder_manifests::rbac::*;

/// What the manager's rendered RBAC lets its cache read: every rule recorded so far (by the
/// controller builders, [`Manager::record_permissions`](crate::Manager::record_permissions))
/// and the manager's own. The `rudder` typed client of a controller checks each read
/// against it before the cache starts an informer, so that a read the rendered RBAC would
/// not allow fails at once, naming the declaration it lacks, instead of an informer that
/// the API server refuses in production ([`ManagerBuilder::require_declared_reads`](crate::ManagerBuilder::require_declared_reads)
/// turns it off). Cloning is cheap; it follows what is recorded after it was made.
#[derive(Clone)]
pub struct DeclaredReads {
    recorded: Arc<Mutex<Rules>>,
    own: Arc<Rules>,
    cache: Cache,
}

/// Records [`Rules`] on the manager it came from
/// ([`Manager::rules_recorder`](crate::Manager::rules_recorder)); the default one records on
/// no manager. Cloning is cheap.
#[derive(Clone, Default)]
pub struct RulesRecorder(pub(crate) Arc<Mutex<Rules>>);

impl std::fmt::Debug for RulesRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RulesRecorder").finish_non_exhaustive()
    }
}

impl RulesRecorder {
    /// Adds `rules` to what the manager renders.
    pub fn record(&self, rules: &Rules) {
        self.0.lock_unpoisoned().merge(rules);
    }
}

impl std::fmt::Debug for DeclaredReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeclaredReads").finish_non_exhaustive()
    }
}

impl DeclaredReads {
    pub(crate) fn new(recorded: Arc<Mutex<Rules>>, own: Rules, cache: Cache) -> Self {
        Self {
            recorded,
            own: Arc::new(own),
            cache,
        }
    }

    /// Whether the recorded rules let the cache read `K` in `namespace` (`None`: every
    /// namespace the cache reads `K` from, or a cluster-scoped `K`): list and watch
    /// ([`Verb::INFORMER`]) wherever the cache's informers of `K` for that read watch
    /// (each of its scopes that covers `namespace`, cluster-wide for a scope of all
    /// namespaces).
    ///
    /// # Errors
    ///
    /// [`Undeclared`] with the first scope and the verbs missing there.
    pub fn check<K: Typed>(&self, namespace: Option<&str>) -> Result<(), Undeclared> {
        let group = K::group(&());
        let resource = K::plural(&());
        let recorded = self.recorded.lock_unpoisoned();
        for scope in self.cache.scopes::<K>() {
            if !covers(&scope, namespace) {
                continue;
            }
            let scope = match scope.namespace {
                Some(namespace) => RuleScope::Namespace(namespace),
                None => RuleScope::Cluster,
            };
            let missing: Vec<Verb> = Verb::INFORMER
                .into_iter()
                .filter(|verb| {
                    !recorded.allows(&scope, &group, &resource, *verb)
                        && !self.own.allows(&scope, &group, &resource, *verb)
                })
                .collect();
            if !missing.is_empty() {
                return Err(Undeclared {
                    kind: K::kind(&()).into_owned(),
                    group: group.into_owned(),
                    resource: resource.into_owned(),
                    scope,
                    missing,
                });
            }
        }
        Ok(())
    }
}

/// Whether the informer of `scope` holds objects of `namespace` (what the cache's reader
/// reads from).
fn covers(scope: &Scope, namespace: Option<&str>) -> bool {
    match (&scope.namespace, namespace) {
        (None, _) | (_, None) => true,
        (Some(a), Some(b)) => a == b,
    }
}

/// A read from the cache of a type no declaration covers: the rendered RBAC does not grant
/// the list and watch its informer needs, so in a cluster the API server would refuse it.
/// Declare the type where it is read (the controller builder's `reads::<K>()`,
/// `watches_kind`, or [`Permissions::informer`] given to `permissions`); retrying does not
/// help until it is declared.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{kind} ({resource} in API group {group:?}) is read from the cache, but no declaration \
     records {missing} on it {scope}, so the rendered RBAC would not let its informer list \
     and watch it: declare it on the controller that reads it with `.reads::<{kind}>()` (or \
     watch it with `.watches_kind::<{kind}, _>(..)`); an operator whose RBAC is written by hand \
     turns this check off with `ManagerBuilder::require_declared_reads(false)`",
    missing = verbs(missing),
    scope = where_(scope)
)]
#[non_exhaustive]
pub struct Undeclared {
    /// The kind read (`Secret`).
    pub kind: String,
    /// Its API group (`""` for the core group).
    pub group: String,
    /// Its resource (`secrets`).
    pub resource: String,
    /// Where the read needs the rule.
    pub scope: RuleScope,
    /// The verbs no recorded rule grants there.
    pub missing: Vec<Verb>,
}

fn verbs(verbs: &[Verb]) -> String {
    verbs
        .iter()
        .map(|verb| verb.as_str())
        .collect::<Vec<_>>()
        .join(" and ")
}

fn where_(scope: &RuleScope) -> String {
    match scope {
        RuleScope::Cluster => "cluster-wide".to_owned(),
        RuleScope::Namespace(namespace) => format!("in namespace {namespace}"),
    }
}

/// The manager's own needs: its Lease, the reviews of secure metrics, the self-signed
/// certificates' Secret and injection targets.
pub(crate) fn manager_rules(
    election: Option<&crate::leader_election::LeaderElectionConfig>,
    #[cfg(feature = "webhook")] secure_metrics: bool,
    #[cfg(feature = "webhook")] certificates: Option<&rudder_certs::SelfSignedConfig>,
) -> Rules {
    let mut rules = Rules::default();
    if let Some(election) = election {
        rules.add(
            RuleScope::Namespace(election.lease_namespace().to_owned()),
            "coordination.k8s.io",
            "leases",
            [Verb::Get, Verb::Create, Verb::Update],
        );
        if election.watch() {
            // A waiting candidate's watch of its Lease (a list and a watch by name).
            rules.add(
                RuleScope::Namespace(election.lease_namespace().to_owned()),
                "coordination.k8s.io",
                "leases",
                [Verb::List, Verb::Watch],
            );
        }
    }
    #[cfg(feature = "webhook")]
    if secure_metrics {
        rules.add(
            RuleScope::Cluster,
            "authentication.k8s.io",
            "tokenreviews",
            [Verb::Create],
        );
        rules.add(
            RuleScope::Cluster,
            "authorization.k8s.io",
            "subjectaccessreviews",
            [Verb::Create],
        );
    }
    #[cfg(feature = "webhook")]
    if let Some(config) = certificates {
        // Every request on the Secret but its creation names it (the watch selects it by
        // name), so only `create` covers the namespace's other Secrets.
        let namespace = RuleScope::Namespace(config.namespace().to_owned());
        rules.add(namespace.clone(), "", "secrets", [Verb::Create]);
        rules.add_named(
            namespace,
            "",
            "secrets",
            config.secret(),
            [Verb::Get, Verb::List, Verb::Watch, Verb::Update],
        );
        let targets = config.inject_targets();
        // The injector reads, watches (selected by name) and replaces each target by name.
        let injected = [Verb::Get, Verb::List, Verb::Watch, Verb::Update];
        for (names, group, resource) in [
            (
                &targets.mutating,
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
            ),
            (
                &targets.validating,
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
            ),
            (
                &targets.crds,
                "apiextensions.k8s.io",
                "customresourcedefinitions",
            ),
        ] {
            for name in names {
                rules.add_named(RuleScope::Cluster, group, resource, name, injected);
            }
        }
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_election_needs_list_and_watch_on_leases_only_with_its_watch() {
        let scope = RuleScope::Namespace("ops".into());
        let lease = |verb| {
            let config = crate::leader_election::LeaderElectionConfig::new("ops", "lock");
            let on = manager_rules(Some(&config), false, None);
            let off = manager_rules(Some(&config.with_watch(false)), false, None);
            (
                on.allows(&scope, "coordination.k8s.io", "leases", verb),
                off.allows(&scope, "coordination.k8s.io", "leases", verb),
            )
        };
        for verb in [Verb::Get, Verb::Create, Verb::Update] {
            assert_eq!(lease(verb), (true, true));
        }
        for verb in [Verb::List, Verb::Watch] {
            assert_eq!(lease(verb), (true, false));
        }
    }

    #[cfg(feature = "webhook")]
    #[test]
    fn self_signed_certificates_name_their_secret_and_targets() {
        let targets = rudder_certs::InjectTargets::new()
            .mutating("op-mutating")
            .validating("op-validating");
        let config =
            rudder_certs::SelfSignedConfig::new("op-certs", "ops", "op-webhook").inject(targets);
        let rules = manager_rules(None, false, Some(&config));
        let ns = RuleScope::Namespace("ops".into());
        assert!(rules.allows(&ns, "", "secrets", Verb::Create));
        for verb in [Verb::Get, Verb::List, Verb::Watch, Verb::Update] {
            assert!(rules.allows_named(&ns, "", "secrets", "op-certs", verb));
            assert!(!rules.allows(&ns, "", "secrets", verb));
            for (resource, name) in [
                ("mutatingwebhookconfigurations", "op-mutating"),
                ("validatingwebhookconfigurations", "op-validating"),
            ] {
                let group = "admissionregistration.k8s.io";
                assert!(rules.allows_named(&RuleScope::Cluster, group, resource, name, verb));
                assert!(!rules.allows(&RuleScope::Cluster, group, resource, verb));
            }
        }
        assert!(!rules.allows(
            &RuleScope::Cluster,
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            Verb::Get
        ));
    }
}
