//! RBAC derived from the code: the vocabulary ([`Permissions`], [`Rules`], [`Verb`], ...)
//! lives in [`rudder_manifests::rbac`] and is re-exported here; this module adds the
//! manager's own rules (its Lease, secure metrics' reviews, the self-signed certificates).
//! The check of a cached read against what was declared is the typed client's
//! ([`rudder_client::reads`]); [`Manager::declared_reads`](crate::Manager::declared_reads)
//! gives it the manager's rules.

use std::sync::{Arc, Mutex};

use rudder_core::sync::LockExt;

pub use rudder_manifests::rbac::*;

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
