//! Health probes: `/healthz` and `/readyz` with named checks, in the Kubernetes API server's
//! format.
//!
//! - `GET /healthz` (or `/readyz`): `200 ok` when every check passes, else `500` with the
//!   failing checks listed.
//! - `?verbose`: one line per check, `[+]name ok` or `[-]name failed: reason`, then a summary.
//! - `?exclude=name` (repeatable): leave a check out.
//! - `GET /healthz/<name>`: that check alone.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use futures::future::BoxFuture;
use rudder_core::sync::RwLockExt;

/// A named check: `Ok` when healthy, `Err(reason)` when not.
pub type Check = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// Makes a [`Check`] from an async closure.
pub fn check<F, Fut>(f: F) -> Check
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    Arc::new(move || Box::pin(f()))
}

/// The liveness and readiness checks of a manager; cheap to clone, shared with the server.
#[derive(Clone, Default)]
pub struct HealthChecks {
    healthz: Arc<RwLock<BTreeMap<String, Check>>>,
    readyz: Arc<RwLock<BTreeMap<String, Check>>>,
}

impl std::fmt::Debug for HealthChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |m: &Arc<RwLock<BTreeMap<String, Check>>>| -> Vec<String> {
            m.read()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        f.debug_struct("HealthChecks")
            .field("healthz", &names(&self.healthz))
            .field("readyz", &names(&self.readyz))
            .finish()
    }
}

/// Which endpoint a check belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// `/healthz`: is the process alive (restart it if not).
    Liveness,
    /// `/readyz`: should it receive traffic (caches synced, webhooks serving).
    Readiness,
}

impl HealthChecks {
    /// Adds (or replaces) the check `name` on `probe`.
    pub fn add(&self, probe: Probe, name: impl Into<String>, check: Check) {
        let map = match probe {
            Probe::Liveness => &self.healthz,
            Probe::Readiness => &self.readyz,
        };
        map.write_unpoisoned().insert(name.into(), check);
    }

    fn checks(&self, probe: Probe) -> Vec<(String, Check)> {
        let map = match probe {
            Probe::Liveness => &self.healthz,
            Probe::Readiness => &self.readyz,
        };
        map.read_unpoisoned()
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect()
    }

    /// Answers a request for `path` with `query`: `Some((status, body))` if the path is a
    /// probe's, `None` otherwise.
    pub(crate) async fn answer(&self, path: &str, query: &str) -> Option<(u16, String)> {
        let (probe, endpoint, rest) = if let Some(rest) = path.strip_prefix("/healthz") {
            (Probe::Liveness, "healthz", rest)
        } else if let Some(rest) = path.strip_prefix("/readyz") {
            (Probe::Readiness, "readyz", rest)
        } else {
            return None;
        };
        let checks = self.checks(probe);
        if let Some(name) = rest.strip_prefix('/').filter(|n| !n.is_empty()) {
            let check = checks.iter().find(|(n, _)| n == name)?;
            return Some(match (check.1)().await {
                Ok(()) => (200, "ok".to_owned()),
                Err(reason) => (500, format!("internal server error: {reason}")),
            });
        }
        if !rest.is_empty() {
            return None;
        }
        let params: Vec<(&str, &str)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .collect();
        let verbose = params.iter().any(|(k, _)| *k == "verbose");
        let excluded: Vec<&str> = params
            .iter()
            .filter(|(k, _)| *k == "exclude")
            .map(|(_, v)| *v)
            .collect();
        let mut lines = Vec::new();
        let mut failed = false;
        for (name, check) in &checks {
            if excluded.contains(&name.as_str()) {
                lines.push(format!("[+]{name} excluded: ok"));
                continue;
            }
            match check().await {
                Ok(()) => lines.push(format!("[+]{name} ok")),
                Err(reason) => {
                    failed = true;
                    lines.push(format!("[-]{name} failed: {reason}"));
                }
            }
        }
        let status = if failed { 500 } else { 200 };
        let body = if failed || verbose {
            let verdict = if failed { "failed" } else { "passed" };
            lines.push(format!("{endpoint} check {verdict}"));
            lines.join("\n") + "\n"
        } else {
            "ok".to_owned()
        };
        Some((status, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks() -> HealthChecks {
        let h = HealthChecks::default();
        h.add(Probe::Liveness, "ping", check(|| async { Ok(()) }));
        h.add(
            Probe::Readiness,
            "cache-sync",
            check(|| async { Err("2 informers not synced".to_owned()) }),
        );
        h.add(Probe::Readiness, "ping", check(|| async { Ok(()) }));
        h
    }

    #[tokio::test]
    async fn aggregate_verbose_exclude_and_single_checks() {
        let h = checks();
        assert_eq!(h.answer("/healthz", "").await, Some((200, "ok".into())));
        let (status, body) = h.answer("/readyz", "").await.unwrap();
        assert_eq!(status, 500);
        assert!(
            body.contains("[-]cache-sync failed: 2 informers not synced"),
            "{body}"
        );
        assert!(body.ends_with("readyz check failed\n"));
        let (status, body) = h
            .answer("/readyz", "exclude=cache-sync&verbose")
            .await
            .unwrap();
        assert_eq!(status, 200);
        assert_eq!(
            body,
            "[+]cache-sync excluded: ok\n[+]ping ok\nreadyz check passed\n"
        );
        assert_eq!(h.answer("/readyz/ping", "").await, Some((200, "ok".into())));
        assert_eq!(
            h.answer("/readyz/cache-sync", "").await,
            Some((500, "internal server error: 2 informers not synced".into()))
        );
        assert_eq!(h.answer("/readyz/nope", "").await, None);
        assert_eq!(h.answer("/metrics", "").await, None);
    }
}
