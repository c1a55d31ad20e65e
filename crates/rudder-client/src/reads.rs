//! Reads the operator declared: [`DeclaredReads`] checks a read from the cache against the
//! RBAC rules recorded for the operator before the cache starts an informer, and
//! [`Undeclared`] is the error of a read no rule covers.

use std::sync::{Arc, Mutex};

use rudder_cache::{Cache, Scope, Typed};
use rudder_core::sync::LockExt;
use rudder_manifests::rbac::{RuleScope, Rules, Verb};

/// What an operator's rendered RBAC lets its cache read: every rule recorded so far (by the
/// controller builders and rudder-manager's `Manager::record_permissions`) and the
/// manager's own. A controller's typed [`Client`](crate::Client) checks each read against
/// it before the cache starts an informer ([`Client::with_declared_reads`](crate::Client::with_declared_reads)),
/// so that a read the rendered RBAC would not allow fails at once, naming the declaration
/// it lacks, instead of an informer that the API server refuses in production
/// (rudder-manager's `ManagerBuilder::require_declared_reads(false)` turns it off). The
/// manager makes one (`Manager::declared_reads`). Cloning is cheap; it follows what is
/// recorded after it was made.
#[derive(Clone)]
pub struct DeclaredReads {
    recorded: Arc<Mutex<Rules>>,
    own: Arc<Rules>,
    cache: Cache,
}

impl std::fmt::Debug for DeclaredReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeclaredReads").finish_non_exhaustive()
    }
}

impl DeclaredReads {
    /// The reads `recorded` (the rules recorded so far, shared with whoever records more)
    /// and `own` (rules that are always there) allow, for reads from `cache` (whose scopes
    /// say where its informers of a type watch).
    pub fn new(recorded: Arc<Mutex<Rules>>, own: Rules, cache: Cache) -> Self {
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
/// `watches_kind`, or [`Permissions::informer`](rudder_manifests::rbac::Permissions::informer) given to `permissions`); retrying does not
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
