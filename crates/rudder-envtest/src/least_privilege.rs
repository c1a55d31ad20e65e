//! Proving least privilege: run an operator's flow as a user bound only to its generated
//! roles, stop at the first `forbidden` error it logs, and take the roles apart rule by rule.
//!
//! [`LogCapture`] collects what a tracing subscriber writes (give it to the subscriber as its
//! writer); [`Outcome`] says how a flow ended; [`TestNamespace::wait_for_rule`] waits until a
//! rule's grant (or its removal) reached the authorizer; [`TestNamespace::unneeded_rules`]
//! takes the granted [roles](GrantedRole) apart rule by rule and says which rules a flow did
//! not need.

use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use kube::api::{Api, Patch, PatchParams};

use crate::{Error, Result, TestNamespace, TestUser};

/// Everything written to it, searchable for `forbidden` errors. Clones share one buffer, so
/// a clone can go to the subscriber (`.with_writer(move || capture.clone())`, or a `static`
/// in a `LazyLock` for a global subscriber) while the test reads another.
#[derive(Clone, Debug, Default)]
pub struct LogCapture {
    buffer: Arc<Mutex<String>>,
}

impl LogCapture {
    /// An empty capture.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lines written so far that mention `forbidden` (in any case), oldest first.
    pub fn forbidden_lines(&self) -> Vec<String> {
        self.buffer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .lines()
            .filter(|line| line.to_lowercase().contains("forbidden"))
            .map(str::to_owned)
            .collect()
    }

    /// Forgets what was written (between two runs of a flow).
    pub fn clear(&self) {
        self.buffer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_str(&String::from_utf8_lossy(bytes));
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How a flow run as a restricted user ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every step done, no `forbidden` logged.
    Completed,
    /// A `forbidden` error was met (the first line that says so).
    Forbidden(String),
    /// A step did not finish in time, without a `forbidden` error (which step).
    Stuck(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Completed => f.write_str("completed"),
            Outcome::Forbidden(line) => write!(f, "forbidden: {line}"),
            Outcome::Stuck(step) => write!(f, "stuck at {step}, no forbidden error"),
        }
    }
}

/// A rule in one line, for messages: its API groups, resources and verbs.
pub fn describe_rule(rule: &PolicyRule) -> String {
    format!(
        "{:?} {:?} {:?}",
        rule.api_groups.as_deref().unwrap_or_default(),
        rule.resources.as_deref().unwrap_or_default(),
        rule.verbs
    )
}

impl TestNamespace {
    /// Waits until the authorizer answers `allowed` for `user` doing `rule`'s first verb on
    /// its first resource of its first API group in this namespace: after a Role with or
    /// without `rule` was applied, before the user's flow runs
    /// ([`wait_for_access`](Self::wait_for_access) for one rule).
    ///
    /// # Errors
    ///
    /// As [`wait_for_access`](Self::wait_for_access).
    pub async fn wait_for_rule(
        &self,
        user: &TestUser,
        rule: &PolicyRule,
        allowed: bool,
    ) -> Result<()> {
        let first = |items: Option<&Vec<String>>| {
            items.and_then(|i| i.first()).cloned().unwrap_or_default()
        };
        let verb = rule.verbs.first().cloned().unwrap_or_default();
        let group = first(rule.api_groups.as_ref());
        let resource = first(rule.resources.as_ref());
        self.wait_for_access(user, &verb, &group, &resource, allowed)
            .await
    }
}

/// A role granted to the user under test (already applied, with its binding), whose rules
/// [`TestNamespace::unneeded_rules`] takes away one at a time.
#[derive(Clone, Debug)]
pub enum GrantedRole {
    /// A Role, in its own namespace.
    Namespaced(Role),
    /// A ClusterRole.
    Cluster(ClusterRole),
}

impl GrantedRole {
    /// Its rules, as rendered.
    pub fn rules(&self) -> Vec<PolicyRule> {
        match self {
            GrantedRole::Namespaced(role) => role.rules.clone(),
            GrantedRole::Cluster(role) => role.rules.clone(),
        }
        .unwrap_or_default()
    }

    /// Replaces its rules on the API server (a merge patch of `rules`).
    async fn set_rules(&self, client: &kube::Client, rules: &[PolicyRule]) -> Result<()> {
        let patch = Patch::Merge(serde_json::json!({ "rules": rules }));
        let params = PatchParams::default();
        let (name, result) = match self {
            GrantedRole::Namespaced(role) => {
                let name = role.metadata.name.clone().unwrap_or_default();
                let namespace = role.metadata.namespace.clone().unwrap_or_default();
                let api: Api<Role> = Api::namespaced(client.clone(), &namespace);
                let result = api.patch(&name, &params, &patch).await.map(drop);
                (name, result)
            }
            GrantedRole::Cluster(role) => {
                let name = role.metadata.name.clone().unwrap_or_default();
                let api: Api<ClusterRole> = Api::all(client.clone());
                let result = api.patch(&name, &params, &patch).await.map(drop);
                (name, result)
            }
        };
        result.map_err(|source| Error::Kube {
            context: format!("replace the rules of role {name}"),
            source,
        })
    }
}

impl TestNamespace {
    /// The rules of `roles` that `flow` does not need, described by [`describe_rule`]: each
    /// rule is removed in turn (its role patched without it, the authorizer waited for), the
    /// flow run as `user` under a fresh name (`without-1`, `without-2`, ...: the flow should
    /// use it for what it creates, and clean up after itself), and the rule put back. A rule
    /// is needed when the flow then ends in [`Outcome::Forbidden`]. The roles must already be
    /// granted to `user`, and the flow pass with all of them.
    ///
    /// # Errors
    ///
    /// If a role cannot be patched, or the authorizer does not follow a change within
    /// [`GRANT_TIMEOUT`](crate::GRANT_TIMEOUT).
    pub async fn unneeded_rules(
        &self,
        user: &TestUser,
        roles: &[GrantedRole],
        mut flow: impl AsyncFnMut(&str) -> Outcome,
    ) -> Result<Vec<String>> {
        let client = self.client();
        let mut unneeded = Vec::new();
        let mut run = 0;
        for role in roles {
            let rules = role.rules();
            for (index, rule) in rules.iter().enumerate() {
                let mut without = rules.clone();
                without.remove(index);
                role.set_rules(&client, &without).await?;
                self.wait_for_rule(user, rule, false).await?;
                run += 1;
                let outcome = flow(&format!("without-{run}")).await;
                if !matches!(outcome, Outcome::Forbidden(_)) {
                    unneeded.push(format!("{}: {outcome}", describe_rule(rule)));
                }
                role.set_rules(&client, &rules).await?;
                self.wait_for_rule(user, rule, true).await?;
            }
        }
        Ok(unneeded)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;

    use super::*;

    #[test]
    fn the_capture_finds_forbidden_lines_across_clones_and_forgets_them() {
        let capture = LogCapture::new();
        let mut writer = capture.clone();
        writer
            .write_all(b"INFO started\nERROR configmaps is Forbidden: no\n")
            .unwrap();
        assert_eq!(
            capture.forbidden_lines(),
            ["ERROR configmaps is Forbidden: no"]
        );
        capture.clear();
        assert!(capture.forbidden_lines().is_empty());
    }
}
