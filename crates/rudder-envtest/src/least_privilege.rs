//! Proving least privilege: run an operator's flow as a user bound only to its generated
//! roles, stop at the first `forbidden` error it logs or counts in its metrics, and take the
//! roles apart rule by rule.
//!
//! [`LogCapture`] collects what a tracing subscriber writes (give it to the subscriber as its
//! writer, or take [`LogCapture::global`], which installs one); [`scrape`] and [`forbidden_requests`] read the operator's `/metrics` for API
//! requests answered 403 ([`REQUESTS_METRIC`], which a Rudder manager exports for its
//! client), and [`ForbiddenWatch`] watches both for one run; [`Outcome`] says how a flow
//! ended and [`FlowRun`] adds the 403s its metrics counted; [`TestNamespace::wait_for_rule`]
//! waits until a rule's grant (or its removal) reached the authorizer;
//! [`TestNamespace::unneeded_rules`] takes the granted [roles](GrantedRole) apart rule by rule
//! ([`TestNamespace::unneeded_verbs`]: verb by verb) and says which rules a flow did not show
//! to be needed (in the log and the metrics).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use kube::api::{Api, Patch, PatchParams};
use rudder_core::sync::LockExt;

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
        self.lines_containing("forbidden")
    }

    /// The lines written so far that contain `needle` (in any case), oldest first: to count
    /// how often something was logged.
    pub fn lines_containing(&self, needle: &str) -> Vec<String> {
        let needle = needle.to_lowercase();
        self.lines()
            .into_iter()
            .filter(|line| line.to_lowercase().contains(&needle))
            .collect()
    }

    /// Every line written so far, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.buffer
            .lock_unpoisoned()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The process's capture of everything logged: on first use it installs, as the global
    /// tracing subscriber, a plain-text formatter (no colours) at `INFO` writing into it.
    /// Call it before the operator under test starts. If the process already has a global
    /// subscriber, that one stays and this capture sees nothing.
    ///
    /// ```
    /// let log = rudder_envtest::least_privilege::LogCapture::global();
    /// tracing::warn!("listing pods is forbidden");
    /// assert_eq!(log.forbidden_lines().len(), 1);
    /// ```
    pub fn global() -> &'static LogCapture {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        static GLOBAL: OnceLock<LogCapture> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let capture = LogCapture::new();
            let writer = capture.clone();
            let _ = tracing_subscriber::registry()
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_ansi(false)
                        .with_writer(move || writer.clone()),
                )
                .with(tracing_subscriber::filter::LevelFilter::INFO)
                .try_init();
            capture
        })
    }

    /// Forgets what was written (between two runs of a flow).
    pub fn clear(&self) {
        self.buffer.lock_unpoisoned().clear();
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer
            .lock_unpoisoned()
            .push_str(&String::from_utf8_lossy(bytes));
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The counter of API requests by answer, `rest_client_requests_total{code, method}`
/// (client-go's name; a Rudder manager counts its client's requests under it).
pub const REQUESTS_METRIC: &str = "rest_client_requests_total";

/// How long [`scrape`] waits for a whole answer.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// The number of API requests answered 403 Forbidden in a Prometheus text page: the sum of
/// every [`REQUESTS_METRIC`] series labelled `code="403"` (any method), 0 when there is none.
pub fn forbidden_requests(page: &str) -> f64 {
    crate::metrics::samples(page, REQUESTS_METRIC)
        .into_iter()
        .filter(|(labels, _)| crate::metrics::has_label(labels, "code", "403"))
        .map(|(_, value)| value)
        .sum()
}

/// The body of `GET /metrics` from a plain-HTTP metrics server at `addr`, within
/// [`SCRAPE_TIMEOUT`].
///
/// # Errors
///
/// [`Error::Scrape`] when the server cannot be reached, answers with anything but 200, or
/// takes longer than [`SCRAPE_TIMEOUT`].
pub async fn scrape(addr: SocketAddr) -> Result<String> {
    let fail = |reason: String| Error::Scrape { addr, reason };
    let answer = tokio::time::timeout(SCRAPE_TIMEOUT, crate::http::get(addr, "/metrics"))
        .await
        .map_err(|_| fail(format!("no whole answer within {SCRAPE_TIMEOUT:?}")))?
        .map_err(|e| fail(e.to_string()))?;
    if answer.status != 200 {
        let status = answer.head.lines().next().unwrap_or_default();
        return Err(fail(format!("answered {status:?}")));
    }
    Ok(answer.body)
}

/// Where one run of an operator under test reports `forbidden`: its log (a [`LogCapture`])
/// and its `/metrics` (API requests answered 403 since the run began).
#[derive(Clone, Debug)]
pub struct ForbiddenWatch {
    log: LogCapture,
    metrics: SocketAddr,
    before: f64,
}

impl ForbiddenWatch {
    /// Watches `log` and the plain-HTTP metrics server at `metrics`. `before` is
    /// [`forbidden_requests`] of the same registry before the run made its first request
    /// (the counter is process-wide: render the registry before starting the operator).
    pub fn new(log: &LogCapture, metrics: SocketAddr, before: f64) -> Self {
        Self {
            log: log.clone(),
            metrics,
            before,
        }
    }

    /// API requests answered 403 since the run began, as the operator's `/metrics` says.
    ///
    /// # Errors
    ///
    /// As [`scrape`].
    pub async fn in_metrics(&self) -> Result<f64> {
        Ok(forbidden_requests(&scrape(self.metrics).await?) - self.before)
    }

    /// The first `forbidden` the log shows, else what the metrics count, else `None`.
    ///
    /// # Errors
    ///
    /// As [`scrape`].
    pub async fn first(&self) -> Result<Option<String>> {
        if let Some(line) = self.log.forbidden_lines().into_iter().next() {
            return Ok(Some(line));
        }
        let n = self.in_metrics().await?;
        Ok((n > 0.0).then(|| format!("/metrics: {n} {REQUESTS_METRIC}{{code=\"403\"}}")))
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

/// One run of a flow: how it ended, and the API requests answered 403 that its operator's
/// `/metrics` counted during it ([`ForbiddenWatch::in_metrics`]).
#[derive(Clone, Debug, PartialEq)]
pub struct FlowRun {
    /// How the flow ended.
    pub outcome: Outcome,
    /// Requests answered 403, by the operator's metrics.
    pub forbidden_in_metrics: f64,
}

impl FlowRun {
    /// Completed, with no request answered 403: what the full roles must give.
    pub fn is_clean(&self) -> bool {
        self.outcome == Outcome::Completed && self.forbidden_in_metrics == 0.0
    }

    /// Met a `forbidden` error that the metrics counted too: what a needed rule's removal
    /// must give.
    pub fn is_forbidden_everywhere(&self) -> bool {
        matches!(self.outcome, Outcome::Forbidden(_)) && self.forbidden_in_metrics > 0.0
    }
}

impl std::fmt::Display for FlowRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}; {} requests answered 403 in /metrics",
            self.outcome, self.forbidden_in_metrics
        )
    }
}

/// A rule in one line, for messages: its API groups, resources, the objects it names if
/// any, and verbs.
pub fn describe_rule(rule: &PolicyRule) -> String {
    let names = match rule.resource_names.as_deref() {
        Some(names) if !names.is_empty() => format!(" named {names:?}"),
        _ => String::new(),
    };
    format!(
        "{:?} {:?}{names} {:?}",
        rule.api_groups.as_deref().unwrap_or_default(),
        rule.resources.as_deref().unwrap_or_default(),
        rule.verbs
    )
}

impl TestNamespace {
    /// Waits until the authorizer answers `allowed` for `user` doing `rule`'s first verb on
    /// its first resource of its first API group in this namespace (on its first object when
    /// the rule names some in `resourceNames`): after a Role with or without `rule` was
    /// applied, before the user's flow runs
    /// ([`wait_for_object_access`](Self::wait_for_object_access) for one rule).
    ///
    /// # Errors
    ///
    /// As [`wait_for_object_access`](Self::wait_for_object_access).
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
        let name = rule.resource_names.as_ref().and_then(|n| n.first());
        self.wait_for_object_access(
            user,
            &verb,
            &group,
            &resource,
            name.map(String::as_str),
            allowed,
        )
        .await
    }
}

/// A role granted to the user under test (already applied, with its binding), whose rules
/// [`TestNamespace::unneeded_rules`] takes away one at a time ([`TestNamespace::unneeded_verbs`]:
/// one verb at a time).
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
    /// The rules of `roles` that `flow` does not show to be needed, described by
    /// [`describe_rule`] with the run: each rule is removed in turn (its role patched without
    /// it, the authorizer waited for), the flow run as `user` under a fresh name
    /// (`without-1`, `without-2`, ...: the flow should use it for what it creates, and clean
    /// up after itself), and the rule put back. A rule is shown needed when the flow then
    /// ends in [`Outcome::Forbidden`] and the operator's metrics counted a request answered
    /// 403 ([`FlowRun::is_forbidden_everywhere`]). The roles must already be granted to
    /// `user`, and the flow pass with all of them.
    ///
    /// # Errors
    ///
    /// If a role cannot be patched, or the authorizer does not follow a change within
    /// [`GRANT_TIMEOUT`](crate::GRANT_TIMEOUT).
    pub async fn unneeded_rules(
        &self,
        user: &TestUser,
        roles: &[GrantedRole],
        flow: impl AsyncFnMut(&str) -> FlowRun,
    ) -> Result<Vec<String>> {
        let removals = roles.iter().flat_map(|role| {
            let rules = role.rules();
            (0..rules.len()).map(move |index| {
                let rule = rules[index].clone();
                let mut without = rules.clone();
                without.remove(index);
                Removal {
                    what: describe_rule(&rule),
                    role: role.clone(),
                    without,
                    probe: rule,
                }
            })
        });
        self.unneeded(user, removals.collect(), flow).await
    }

    /// [`unneeded_rules`](Self::unneeded_rules) one verb at a time: for each rule of `roles`,
    /// each resource it names and each of its verbs, the flow runs without that verb on that
    /// resource (the rest of the rule kept), and a verb is shown needed when the flow then
    /// meets a `forbidden` error that the operator's metrics counted too. A rule that grants
    /// several verbs (or resources) together hides a verb the code never uses behind the
    /// ones it does; this finds it. Returns each verb not shown needed, as `"[group]
    /// resource verb: run"`.
    ///
    /// # Errors
    ///
    /// As [`unneeded_rules`](Self::unneeded_rules).
    pub async fn unneeded_verbs(
        &self,
        user: &TestUser,
        roles: &[GrantedRole],
        flow: impl AsyncFnMut(&str) -> FlowRun,
    ) -> Result<Vec<String>> {
        let mut removals = Vec::new();
        for role in roles {
            let rules = role.rules();
            for (index, rule) in rules.iter().enumerate() {
                let resources = rule.resources.clone().unwrap_or_default();
                for resource in &resources {
                    for verb in &rule.verbs {
                        let mut without = rules.clone();
                        without.remove(index);
                        // The rule's other resources keep every verb; this one loses one.
                        let others: Vec<String> = resources
                            .iter()
                            .filter(|r| *r != resource)
                            .cloned()
                            .collect();
                        if !others.is_empty() {
                            without.push(PolicyRule {
                                resources: Some(others),
                                ..rule.clone()
                            });
                        }
                        let fewer: Vec<String> =
                            rule.verbs.iter().filter(|v| *v != verb).cloned().collect();
                        if !fewer.is_empty() {
                            without.push(PolicyRule {
                                resources: Some(vec![resource.clone()]),
                                verbs: fewer,
                                ..rule.clone()
                            });
                        }
                        let probe = PolicyRule {
                            resources: Some(vec![resource.clone()]),
                            verbs: vec![verb.clone()],
                            ..rule.clone()
                        };
                        removals.push(Removal {
                            what: format!(
                                "{:?} {resource} {verb}",
                                rule.api_groups.as_deref().unwrap_or_default()
                            ),
                            role: role.clone(),
                            without,
                            probe,
                        });
                    }
                }
            }
        }
        self.unneeded(user, removals, flow).await
    }

    /// Runs `flow` once per removal, with the removal's role patched to its rules without
    /// what it takes away (and the authorizer waited for), then puts the role back; returns
    /// the removals the flow did not show to be needed.
    async fn unneeded(
        &self,
        user: &TestUser,
        removals: Vec<Removal>,
        mut flow: impl AsyncFnMut(&str) -> FlowRun,
    ) -> Result<Vec<String>> {
        let client = self.client();
        let mut unneeded = Vec::new();
        for (run, removal) in removals.into_iter().enumerate() {
            let rules = removal.role.rules();
            removal.role.set_rules(&client, &removal.without).await?;
            self.wait_for_rule(user, &removal.probe, false).await?;
            let ran = flow(&format!("without-{}", run + 1)).await;
            if !ran.is_forbidden_everywhere() {
                unneeded.push(format!("{}: {ran}", removal.what));
            }
            removal.role.set_rules(&client, &rules).await?;
            self.wait_for_rule(user, &removal.probe, true).await?;
        }
        Ok(unneeded)
    }
}

/// One thing taken away from a granted role for a run: `what` (for messages), the role's
/// rules `without` it, and a rule whose first verb on its first resource the authorizer
/// must refuse once it is gone.
struct Removal {
    what: String,
    role: GrantedRole,
    without: Vec<PolicyRule>,
    probe: PolicyRule,
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

    #[test]
    fn a_run_is_clean_only_without_403s_and_forbidden_only_with_them_counted() {
        let run = |outcome, forbidden_in_metrics| FlowRun {
            outcome,
            forbidden_in_metrics,
        };
        let forbidden = || Outcome::Forbidden("configmaps is forbidden".to_owned());
        assert!(run(Outcome::Completed, 0.0).is_clean());
        assert!(!run(Outcome::Completed, 1.0).is_clean());
        assert!(!run(forbidden(), 0.0).is_clean());
        assert!(run(forbidden(), 2.0).is_forbidden_everywhere());
        assert!(!run(forbidden(), 0.0).is_forbidden_everywhere());
        assert!(!run(Outcome::Stuck("x".to_owned()), 3.0).is_forbidden_everywhere());
        assert!(
            run(Outcome::Completed, 1.0)
                .to_string()
                .contains("1 requests answered 403")
        );
    }

    #[test]
    fn forbidden_requests_sums_the_403_series_of_every_method() {
        let page = "# HELP rest_client_requests_total Number of HTTP requests.\n\
            # TYPE rest_client_requests_total counter\n\
            rest_client_requests_total{code=\"200\",method=\"GET\"} 40\n\
            rest_client_requests_total{code=\"403\",method=\"GET\"} 2\n\
            rest_client_requests_total{method=\"PATCH\",code=\"403\"} 1\n\
            rest_client_requests_total{code=\"4030\",method=\"GET\"} 7\n\
            rest_client_requests_total_other{code=\"403\",method=\"GET\"} 9\n\
            workqueue_adds_total{name=\"403\"} 5\n";
        assert_eq!(forbidden_requests(page), 3.0);
        assert_eq!(forbidden_requests(""), 0.0);
        assert_eq!(
            forbidden_requests("rest_client_requests_total{code=\"403\"} x\n"),
            0.0
        );
    }

    #[tokio::test]
    async fn scrape_reads_the_body_and_refuses_other_answers() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            for answer in [
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nup 1\n",
                "HTTP/1.1 500 Internal Server Error\r\n\r\nno\n",
            ] {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut request = [0; 1024];
                let _ = stream.read(&mut request).await.unwrap();
                stream.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        assert_eq!(scrape(addr).await.unwrap(), "up 1\n");
        let error = scrape(addr).await.unwrap_err().to_string();
        assert!(error.contains("500"), "{error}");
        server.await.unwrap();
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        assert!(matches!(scrape(closed).await, Err(Error::Scrape { .. })));
    }
}
