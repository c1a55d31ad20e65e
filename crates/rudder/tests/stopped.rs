//! Shutdown means stopped: once `Manager::start` (or `start_until_signal`) has returned, no
//! task the manager started is left on its runtime and no request of the operator reaches the
//! API server, even when a reconcile ignores its cancellation and is aborted at the deadline.
//!
//! The operator runs as a ServiceAccount of its own, on a runtime of its own (one thread, so
//! its task count is exact whenever the test reads it), with leader election, informers on
//! three types, the probe, metrics and webhook servers and self-signed webhook certificates.
//! The API server writes an audit log (every request, at the Metadata level, written before
//! the response), and the test reads the operator's requests from it.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks and its operator thread"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::print_stderr,
    reason = "the test reports the control plane and the task counts it compared"
)]

mod support;

use std::collections::BTreeSet;
use std::future::Future;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use rudder::certs::SelfSignedConfig;
use rudder::lease::leader_election::LeaderElectionConfig;
use rudder::manager::rbac::RbacObjects;
use rudder::manager::{Error, GracefulShutdown};
use rudder::prelude::*;
use rudder_envtest::poll::eventually;
use rudder_envtest::{TestEnv, TestNamespace, TestUser};
use serde::Deserialize;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// How long the stopped manager's runnables get: the stubborn reconcile is aborted after it.
const GRACE: Duration = Duration::from_secs(2);
/// How long any wait of this test may take before it fails.
const WAIT: Duration = Duration::from_secs(60);
/// The controller whose reconcile never returns.
const STUBBORN: &str = "stubborn";

/// Every request, at the Metadata level (who, what, when; no bodies).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: Metadata
";

#[derive(Clone, Copy, Debug)]
enum StopBy {
    /// `start(token)`, the token cancelled.
    Token,
    /// `start_until_signal()`, SIGTERM sent to this process.
    Signal,
}

#[tokio::test]
async fn a_stopped_manager_leaves_no_task_and_sends_no_request() {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("stopped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY).unwrap();
    let log = dir.join("audit.log");
    let env = TestEnv::builder()
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", log.display()))
        .apiserver_arg("--audit-log-mode=blocking")
        .apiserver_arg("--audit-log-format=json")
        .start()
        .await
        .unwrap();
    eprintln!("control plane {}", env.version());
    let mut audit = AuditLog::new(&log);
    // The signal last: the handler start_until_signal installs stays for the process's life.
    for stop_by in [StopBy::Token, StopBy::Signal] {
        stop_and_check(&env, &mut audit, stop_by).await;
    }
    drop(env);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs an operator, stops it as `stop_by` says during a reconcile that ignores its
/// cancellation, and checks what is left once `start` has returned.
async fn stop_and_check(env: &TestEnv, audit: &mut AuditLog, stop_by: StopBy) {
    let ns = env
        .namespace(&format!("stopped-{stop_by:?}"))
        .await
        .unwrap();
    let user = ns.service_account("operator").await.unwrap();
    let username = user.username();
    create_config_map(&ns, "busy").await;

    let mut operator = Operator::start(env, &ns, &user, stop_by);
    let rbac = operator.built().await;
    grant(&ns, &user, &rbac).await;
    operator.go();
    let manager = Arc::clone(&operator.manager);
    let addresses = eventually(
        "the operator reconciling, its servers serving",
        WAIT,
        async || {
            assert!(!operator.ended(), "the operator ended early");
            let addresses = [
                manager.health_address()?,
                manager.metrics_address()?,
                manager.webhook_address().await?,
            ];
            operator
                .reconciling
                .load(Ordering::SeqCst)
                .then_some(addresses)
        },
    )
    .await;

    match stop_by {
        StopBy::Token => operator.stop.cancel(),
        StopBy::Signal => {
            let status = std::process::Command::new("kill")
                .args(["-TERM", &std::process::id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
        }
    }
    let outcome = tokio::time::timeout(WAIT, operator.stopped())
        .await
        .expect("start returned");

    // The documented contract: a reconcile that ignores its context is aborted at the
    // deadline, and start names its controller.
    match &outcome.result {
        Err(Error::ShutdownTimeout { timeout, left }) => {
            assert_eq!(*timeout, GRACE);
            assert_eq!(left, &[format!("controller {STUBBORN}")]);
        }
        other => panic!("{stop_by:?}: expected ShutdownTimeout, got {other:?}"),
    }
    eprintln!(
        "{stop_by:?}: tasks before start {}, after it returned {} (and {} HTTP connection tasks of the client's pool)",
        outcome.tasks_before, outcome.tasks_after, outcome.connections_after
    );
    assert_eq!(
        outcome.tasks_after, outcome.tasks_before,
        "{stop_by:?}: tasks started by the manager are still alive after start returned"
    );
    for addr in addresses {
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "{stop_by:?}: {addr} still accepts connections after start returned"
        );
    }

    // A request made after the return, by another user: once the audit log has it, it has
    // every request the API server received before it.
    let marker = format!("marker-{}", Timestamp::now().as_nanosecond());
    create_config_map(&ns, &marker).await;
    eventually("the marker in the audit log", WAIT, async || {
        audit.read();
        audit
            .events
            .iter()
            .any(|e| e.is_complete() && e.names(ns.name(), &marker))
            .then_some(())
    })
    .await;

    let mine: Vec<&AuditEvent> = audit
        .events
        .iter()
        .filter(|e| e.user.username == username)
        .collect();
    let watches: BTreeSet<String> = mine
        .iter()
        .filter(|e| e.verb == "watch")
        .map(|e| e.audit_id.clone())
        .collect();
    assert!(
        watches.len() >= 3,
        "{stop_by:?}: the operator watched (configmaps, secrets, leases): {watches:?}"
    );
    let late: Vec<String> = mine
        .iter()
        .filter(|e| e.request_received_timestamp.0 > outcome.returned_at)
        .map(|e| e.describe())
        .collect();
    drop(mine);
    assert!(
        late.is_empty(),
        "{stop_by:?}: requests of the operator received after start returned at {}:\n{}",
        outcome.returned_at,
        late.join("\n")
    );

    // Every watch of the operator's ends: the API server sees its client go away.
    let open = eventually_or_open(audit, &username, &watches).await;
    assert!(
        open.is_empty(),
        "{stop_by:?}: watches of the operator still open {WAIT:?} after start returned:\n{}",
        open.join("\n")
    );
    drop(manager);
    operator.finish().await;
}

/// Polls the audit log until each of `watches` has completed; returns those still open at
/// the deadline (empty when all ended).
async fn eventually_or_open(
    audit: &mut AuditLog,
    username: &str,
    watches: &BTreeSet<String>,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        audit.read();
        let done: BTreeSet<&str> = audit
            .events
            .iter()
            .filter(|e| e.user.username == username && e.is_complete())
            .map(|e| e.audit_id.as_str())
            .collect();
        let open: Vec<String> = watches
            .iter()
            .filter(|id| !done.contains(id.as_str()))
            .filter_map(|id| audit.events.iter().find(|e| e.audit_id == **id))
            .map(AuditEvent::describe)
            .collect();
        if open.is_empty() || tokio::time::Instant::now() >= deadline {
            return open;
        }
        tokio::time::sleep(rudder_envtest::poll::POLL_INTERVAL).await;
    }
}

/// Creates an empty ConfigMap `name` in `ns`, as the admin.
async fn create_config_map(ns: &TestNamespace, name: &str) {
    support::create_config_maps(ns, &[name.to_owned()], 0).await;
}

/// Applies the operator's rendered RBAC as the admin and waits until the authorizer allows
/// the first verb of each rule.
async fn grant(ns: &TestNamespace, user: &TestUser, rbac: &RbacObjects) {
    let client = ns.client();
    let post = PostParams::default();
    if let Some(role) = &rbac.cluster_role {
        Api::<ClusterRole>::all(client.clone())
            .create(&post, role)
            .await
            .unwrap();
    }
    if let Some(binding) = &rbac.cluster_role_binding {
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&post, binding)
            .await
            .unwrap();
    }
    for role in &rbac.roles {
        let namespace = role.metadata.namespace.as_deref().unwrap();
        Api::<Role>::namespaced(client.clone(), namespace)
            .create(&post, role)
            .await
            .unwrap();
    }
    for binding in &rbac.role_bindings {
        let namespace = binding.metadata.namespace.as_deref().unwrap();
        Api::<RoleBinding>::namespaced(client.clone(), namespace)
            .create(&post, binding)
            .await
            .unwrap();
    }
    let rules = rbac
        .cluster_role
        .iter()
        .flat_map(|r| r.rules.iter().flatten())
        .chain(rbac.roles.iter().flat_map(|r| r.rules.iter().flatten()));
    for rule in rules {
        let group = rule.api_groups.iter().flatten().next().unwrap();
        let resource = rule.resources.iter().flatten().next().unwrap();
        let verb = rule.verbs.first().unwrap();
        ns.wait_for_access(user, verb, group, resource, true)
            .await
            .unwrap();
    }
}

/// What the operator thread hands back once `start` has returned.
struct Outcome {
    result: Result<(), Error>,
    /// The wall clock right after the return (the API server's audit log uses the same).
    returned_at: Timestamp,
    /// Tasks alive on the operator's runtime before `start`, not counting the HTTP client's
    /// connection tasks.
    tasks_before: usize,
    /// The same right after `start` returned.
    tasks_after: usize,
    /// The HTTP client's connection tasks alive then (its pool's idle connections).
    connections_after: usize,
}

/// An operator running on a thread and runtime of its own.
struct Operator {
    manager: Arc<Manager>,
    reconciling: Arc<AtomicBool>,
    stop: CancellationToken,
    built: Option<oneshot::Receiver<RbacObjects>>,
    go: Option<oneshot::Sender<()>>,
    stopped: Option<oneshot::Receiver<Outcome>>,
    release: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Operator {
    /// Builds the operator on its thread, as `user`, and hands back its RBAC; it starts on
    /// [`go`](Self::go).
    fn start(env: &TestEnv, ns: &TestNamespace, user: &TestUser, stop_by: StopBy) -> Self {
        let mut config = env.config().clone();
        config.default_namespace = ns.name().to_owned();
        config.auth_info = kube::config::AuthInfo {
            token: Some(user.token().into()),
            ..kube::config::AuthInfo::default()
        };
        let namespace = ns.name().to_owned();
        let reconciling = Arc::new(AtomicBool::new(false));
        let stop = CancellationToken::new();
        let (built_tx, built) = oneshot::channel();
        let (manager_tx, manager_rx) = std::sync::mpsc::channel();
        let (go, go_rx) = oneshot::channel();
        let (stopped_tx, stopped) = oneshot::channel();
        let (release, release_rx) = oneshot::channel::<()>();
        let thread = std::thread::spawn({
            let (reconciling, stop) = (Arc::clone(&reconciling), stop.clone());
            move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let connections = Connections::default();
                    let client =
                        kube::client::ClientBuilder::try_from((config, connections.clone()))
                            .unwrap()
                            .build();
                    let manager = Arc::new(build(client, &namespace, reconciling).await);
                    manager_tx.send(Arc::clone(&manager)).unwrap();
                    let rbac =
                        manager
                            .permissions()
                            .render("stopped-operator", "operator", &namespace);
                    let _ = built_tx.send(rbac);
                    if go_rx.await.is_err() {
                        return;
                    }
                    let alive = || {
                        tokio::runtime::Handle::current()
                            .metrics()
                            .num_alive_tasks()
                    };
                    let tasks_before = alive() - connections.alive();
                    let result = match stop_by {
                        StopBy::Token => manager.start(stop).await,
                        StopBy::Signal => manager.start_until_signal().await,
                    };
                    let returned_at = Timestamp::now();
                    let connections_after = connections.alive();
                    let tasks_after = alive() - connections_after;
                    let _ = stopped_tx.send(Outcome {
                        result,
                        returned_at,
                        tasks_before,
                        tasks_after,
                        connections_after,
                    });
                    // The runtime keeps running whatever is left on it until the test has
                    // read the audit log: a task left behind would show there.
                    let _ = release_rx.await;
                });
            }
        });
        let manager = manager_rx.recv().expect("the operator was built");
        Self {
            manager,
            reconciling,
            stop,
            built: Some(built),
            go: Some(go),
            stopped: Some(stopped),
            release,
            thread,
        }
    }

    /// The operator's RBAC, once it is built.
    async fn built(&mut self) -> RbacObjects {
        let built = self.built.take().expect("asked once");
        built.await.expect("the operator thread panicked")
    }

    /// Lets the operator start.
    fn go(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }

    /// What the operator's `start` returned, once it has.
    async fn stopped(&mut self) -> Outcome {
        let stopped = self.stopped.take().expect("asked once");
        stopped.await.expect("the operator thread panicked")
    }

    fn ended(&self) -> bool {
        self.thread.is_finished()
    }

    /// Lets the operator's runtime end, and joins its thread.
    async fn finish(self) {
        drop(self.manager);
        let _ = self.release.send(());
        let thread = self.thread;
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .unwrap()
            .expect("the operator thread ended cleanly");
    }
}

/// The operator: a controller of ConfigMaps owning Secrets whose reconcile never returns
/// (it ignores its cancellation, so only the deadline's abort ends it), leader election with
/// its Lease watch, the probe and metrics servers, and a webhook server with self-signed
/// certificates (whose Secret it watches); its cache confined to `namespace`.
async fn build(client: kube::Client, namespace: &str, reconciling: Arc<AtomicBool>) -> Manager {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let confined = namespace.to_owned();
    let manager = Manager::builder(client)
        .health_probe_address(Some(loopback))
        .metrics_address(Some(loopback))
        .graceful_shutdown(GracefulShutdown::After(GRACE))
        .cache(move |c| c.default_namespace(confined))
        .leader_election(
            LeaderElectionConfig::new(namespace, "stopped-operator")
                .with_identity("operator-0")
                .with_release_on_cancel(true),
        )
        .webhook_options(rudder::webhook::Options::new().bind_address(loopback))
        .self_signed_webhook_certificates(
            SelfSignedConfig::new("webhook-certs", namespace, "webhook-service")
                .extra_names(["127.0.0.1"]),
        )
        .build()
        .unwrap();
    rudder::new_controller(&manager)
        .for_::<ConfigMap>()
        .owns::<Secret>()
        .named(STUBBORN)
        .complete(Stubborn { reconciling })
        .await
        .unwrap();
    rudder::new_webhook(&manager)
        .for_::<ConfigMap>()
        .validator(support::Rules)
        .complete()
        .unwrap();
    manager
}

/// Says it reconciles, then waits forever, cancelled or not.
struct Stubborn {
    reconciling: Arc<AtomicBool>,
}

impl Reconciler for Stubborn {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        self.reconciling.store(true, Ordering::SeqCst);
        std::future::pending::<()>().await;
        Ok(Action::done())
    }
}

/// The executor of the operator's HTTP client: spawns its connection tasks as tokio's
/// executor does, and counts those alive, so that the test can tell them from the
/// manager's (an idle connection in the client's pool is the client's, not the manager's).
#[derive(Clone, Default)]
struct Connections(Arc<AtomicUsize>);

impl Connections {
    fn alive(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl<F> hyper::rt::Executor<F> for Connections
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        let alive = Alive::new(Arc::clone(&self.0));
        tokio::spawn(async move {
            let _alive = alive;
            future.await
        });
    }
}

/// Counts one connection task while it lives (its future is dropped when it ends or is
/// aborted).
struct Alive(Arc<AtomicUsize>);

impl Alive {
    fn new(count: Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The audit log as read so far: whole lines only, read on from where the last read ended.
struct AuditLog {
    path: PathBuf,
    offset: u64,
    events: Vec<AuditEvent>,
}

impl AuditLog {
    fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
            offset: 0,
            events: Vec::new(),
        }
    }

    /// Reads the lines written since the last read (a line still being written waits).
    fn read(&mut self) {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return;
        };
        file.seek(SeekFrom::Start(self.offset)).unwrap();
        let mut reader = BufReader::new(file);
        let mut line = String::new();
        loop {
            line.clear();
            let read = reader.read_line(&mut line).unwrap();
            if read == 0 || !line.ends_with('\n') {
                return;
            }
            self.offset += read as u64;
            let event: AuditEvent = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("an audit event that does not parse ({e}): {line}"));
            self.events.push(event);
        }
    }
}

/// The fields of an `audit.k8s.io/v1` Event this test reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditEvent {
    #[serde(rename = "auditID")]
    audit_id: String,
    stage: String,
    verb: String,
    #[serde(rename = "requestURI")]
    request_uri: String,
    user: AuditUser,
    #[serde(default)]
    object_ref: Option<AuditObject>,
    request_received_timestamp: MicroTime,
}

#[derive(Deserialize)]
struct AuditUser {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
struct AuditObject {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

impl AuditEvent {
    /// Whether the request has been answered in full (or the handler panicked).
    fn is_complete(&self) -> bool {
        self.stage == "ResponseComplete" || self.stage == "Panic"
    }

    /// Whether the request is about the object `namespace`/`name`.
    fn names(&self, namespace: &str, name: &str) -> bool {
        self.object_ref.as_ref().is_some_and(|o| {
            o.namespace.as_deref() == Some(namespace) && o.name.as_deref() == Some(name)
        })
    }

    fn describe(&self) -> String {
        format!(
            "{} {} {} ({}, received {})",
            self.verb,
            self.request_uri,
            self.audit_id,
            self.stage,
            self.request_received_timestamp.0
        )
    }
}
