//! A member that leaves leaves nothing: one member control plane announced and withdrawn
//! again and again (its kubeconfig Secret created and deleted on the home cluster), each time
//! engaged, its controller reconciling there, then disengaged. Afterwards the member's API
//! server has no watch of the operator open, and the process's tasks, file descriptors and
//! memory are back to their level.
//!
//! The test builds its own runtime (several threads, as an operator's) to read its task
//! count. Each HTTP connection is one task and one socket: the connections to the home
//! cluster (the test's, the provider's watch) come and go with their pools and are taken
//! out of the counts, and those to the member's API server must all be gone, since the test
//! keeps no client of the member at the end.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks (the manager's)"
)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

// The facade's test helpers, one module for both crates' tests.
#[path = "../../rudder/tests/support/mod.rs"]
mod support;

use std::alloc::System;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use rudder::multicluster::{
    DEFAULT_KUBECONFIG_KEY, DEFAULT_SECRET_LABEL, Fleet, KubeconfigSecrets,
};
use rudder::prelude::*;
use rudder_envtest::TestEnv;
use rudder_envtest::poll::{POLL_INTERVAL, eventually, until};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::time::Instant;

/// Counts the heap's live bytes: a measure of what the process holds that the allocator's
/// keeping of freed memory does not blur, reported beside RSS.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// How many times the member joins and leaves.
const CYCLES: u32 = 30;
/// The member's name, the same every time (a new name would be a new metric series each
/// time, which the exporter keeps by design: growth that is no leak).
const MEMBER: &str = "member";
/// The namespace of the member's ConfigMap.
const WORK: &str = "work";
/// The ConfigMap the controller stamps in the member.
const OBJECT: &str = "cycled";
/// Where the kubeconfig Secret lives on the home cluster.
const FLEET_NS: &str = "fleet-system";
const SEEN_ANNOTATION: &str = "fleet.rudder.dev/seen";
/// How long any wait of this test may take before it fails.
const WITHIN: Duration = Duration::from_secs(60);

#[test]
fn a_member_that_leaves_leaves_nothing() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(Box::pin(cycles()));
}

async fn cycles() {
    let started = Instant::now();
    let (home_env, member_env) = tokio::join!(TestEnv::start(), TestEnv::start());
    let (home_env, member_env) = (home_env.unwrap(), member_env.unwrap());
    eprintln!("control planes {}", member_env.version());

    let home = home_env.client().unwrap();
    // The test's client of the member, dropped before the member is measured.
    let member = member_env.client().unwrap();
    create_namespace(&home, FLEET_NS).await;
    create_namespace(&member, WORK).await;
    put(&member, 0).await;
    let secrets: Api<Secret> = Api::namespaced(home.clone(), FLEET_NS);
    let secret = kubeconfig_secret(&std::fs::read_to_string(member_env.kubeconfig_path()).unwrap());

    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let manager = Arc::new(
        Manager::builder(home_env.client().unwrap())
            .health_probe_address(None)
            // A recorder installed, so that whatever a member registers in it is kept.
            .metrics_address(Some(loopback))
            .build()
            .unwrap(),
    );
    let fleet = Fleet::builder(&manager)
        .kubeconfig_secrets(KubeconfigSecrets::new(FLEET_NS))
        .cache(|cache| cache.default_namespace(WORK))
        .probe_every(Duration::from_millis(200))
        .build()
        .unwrap();
    fleet
        .new_controller()
        .for_::<ConfigMap>()
        .complete_with(|tools| Stamp { tools })
        .unwrap();
    let running = support::start(&manager);
    eventually("the manager's metrics server", WITHIN, async || {
        manager.metrics_address()
    })
    .await;
    let process = Process::new(&home_env, &member_env);
    // The manager's client connected too (the provider listing the Secrets): a socket to
    // the home cluster beside the test's own.
    eventually("the provider connected", WITHIN, async || {
        (process.reading().home >= 2).then_some(())
    })
    .await;

    let watches_before = watches(&member_env).await;
    drop(member);
    let before = settle(
        "no connection to the member before the cycles",
        async || process.reading(),
        |r| r.member == 0,
    )
    .await;
    assert_eq!(
        before.member, 0,
        "the test's member client did not let go of its connections"
    );
    let member = member_env.client().unwrap();
    eprintln!("before the cycles: {before}, member watches {watches_before}");

    let mut first = before;
    let mut watches_engaged = 0.0;
    for cycle in 1..=CYCLES {
        let began = Instant::now();
        put(&member, cycle).await;
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        until(
            &format!("cycle {cycle}: the member engaged"),
            WITHIN,
            || fleet.engaged() == [MEMBER],
        )
        .await;
        eventually(
            &format!("cycle {cycle}: the object stamped in the member"),
            WITHIN,
            async || stamped(&member, cycle).await.then_some(()),
        )
        .await;
        if cycle == 1 {
            // The measure sees the operator's watch: it rises above the level before. Polled:
            // after a paginated list the cache is synced before its watch is registered.
            watches_engaged = eventually(
                "the member's watch gauge sees the operator's watch",
                WITHIN,
                async || {
                    let now = watches(&member_env).await;
                    (now > watches_before).then_some(now)
                },
            )
            .await;
        }
        secrets
            .delete(MEMBER, &DeleteParams::default())
            .await
            .unwrap();
        until(
            &format!("cycle {cycle}: the member disengaged"),
            WITHIN,
            || fleet.cluster(MEMBER).is_none() && fleet.engaged().is_empty(),
        )
        .await;
        let now = process.reading();
        if cycle == 1 {
            first = now;
        }
        eprintln!("cycle {cycle} in {:?}: {now}", began.elapsed());
    }
    assert!(
        watches_engaged > watches_before,
        "the member's watch gauge did not see the operator's watch: {watches_before} before, {watches_engaged} engaged"
    );

    drop(member);

    // Nothing of the member is left: polled, since a disengagement ends after the member
    // leaves `Fleet::engaged` and an API server notices a closed watch when it next writes.
    let watches_after = settle(
        "the member's open watches",
        async || watches(&member_env).await,
        |w| *w <= watches_before,
    )
    .await;
    let connections_after = settle(
        "the connections to the member",
        async || process.reading().member,
        |c| *c == 0,
    )
    .await;
    let tasks_after = settle(
        "the runtime's tasks",
        async || process.reading().tasks,
        |t| *t <= before.tasks,
    )
    .await;
    let fds_after = settle(
        "the process's file descriptors",
        async || process.reading().fds,
        |f| *f <= before.fds + FD_SLACK,
    )
    .await;
    let after = process.reading();
    eprintln!(
        "after {CYCLES} cycles ({:?} in all): member watches {watches_before} before, {watches_engaged} engaged, {watches_after} after; \
         tasks {} before, {tasks_after} after; fds {} before, {fds_after} after; \
         RSS {} KB before, {} KB after the first cycle, {} KB after the last; \
         live heap {} KB before, {} KB after the first cycle, {} KB after the last",
        started.elapsed(),
        before.tasks,
        before.fds,
        before.rss / 1024,
        first.rss / 1024,
        after.rss / 1024,
        before.heap / 1024,
        first.heap / 1024,
        after.heap / 1024,
    );
    assert!(
        watches_after <= watches_before,
        "watches still open on the member {WITHIN:?} after it left: {watches_after}, {watches_before} before the cycles"
    );
    assert_eq!(
        connections_after, 0,
        "connections to the member still open {WITHIN:?} after it left"
    );
    assert!(
        tasks_after <= before.tasks,
        "tasks alive {WITHIN:?} after the member left: {tasks_after}, {} before the cycles",
        before.tasks
    );
    assert!(
        fds_after <= before.fds + FD_SLACK,
        "file descriptors open {WITHIN:?} after the member left: {fds_after}, {} before the cycles",
        before.fds
    );
    // Allocators keep what they were given back (arenas, thread caches), so RSS is no exact
    // measure of what the fleet holds: this only bounds growth that would come with every
    // cycle, which after 30 cycles would be far above the first cycle's level. The live heap
    // is reported, not asserted: the exporter keeps its histograms' samples until it is
    // scraped, and nothing scrapes it here.
    assert!(
        after.rss < 2 * first.rss + 50 * 1024 * 1024,
        "RSS grew from {} KB after the first cycle to {} KB after {CYCLES}",
        first.rss / 1024,
        after.rss / 1024
    );

    running.0.cancel();
    running.1.await.unwrap().unwrap();
    member_env.stop().unwrap();
    home_env.stop().unwrap();
}

/// File descriptors the process may have beyond its level before the cycles, once the
/// connections to the home cluster are taken out: none. The runtime's own (its epoll, its
/// waker, the metrics server's listener) were open before the cycles and stay; a file read
/// (a kubeconfig, a certificate) is closed when read; each connection is one socket,
/// counted apart.
const FD_SLACK: usize = 0;

/// Stamps the ConfigMap with the value of its `v` key, through its cluster's client.
struct Stamp {
    tools: Tools,
}

impl Reconciler for Stamp {
    type Error = kube::Error;

    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let Some(cm) = self.tools.get::<ConfigMap>(&request).await.unwrap() else {
            return Ok(Action::done());
        };
        let v = cm.data.as_ref().and_then(|d| d.get("v")).cloned();
        let seen = cm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SEEN_ANNOTATION))
            .cloned();
        if v.is_some() && seen != v {
            let api: Api<ConfigMap> = Api::namespaced(self.tools.kube().clone(), WORK);
            let patch = serde_json::json!({"metadata": {"annotations": {SEEN_ANNOTATION: v}}});
            api.patch(
                request.name(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        }
        Ok(Action::done())
    }
}

/// What the process holds, the connections to the home cluster taken out.
struct Process {
    /// The API servers' ports: home's and the member's.
    home_port: u16,
    member_port: u16,
    page_size: u64,
}

#[derive(Clone, Copy, Debug)]
struct Reading {
    /// Tasks alive on the runtime, but the connection tasks to the home cluster.
    tasks: usize,
    /// Open file descriptors, but the sockets connected to the home cluster.
    fds: usize,
    /// Resident memory, in bytes.
    rss: u64,
    /// Live heap (allocated less freed), in bytes.
    heap: isize,
    /// Sockets connected to the home cluster's API server (taken out of `tasks`, `fds`).
    home: usize,
    /// Sockets connected to the member's API server.
    member: usize,
}

impl std::fmt::Display for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tasks {}, fds {}, RSS {} KB, live heap {} KB, connections to the member {} (and {} to home)",
            self.tasks,
            self.fds,
            self.rss / 1024,
            self.heap / 1024,
            self.member,
            self.home,
        )
    }
}

impl Process {
    fn new(home: &TestEnv, member: &TestEnv) -> Self {
        let port = |env: &TestEnv| env.config().cluster_url.port_u16().unwrap();
        let out = std::process::Command::new("getconf")
            .arg("PAGESIZE")
            .output()
            .unwrap();
        Self {
            home_port: port(home),
            member_port: port(member),
            page_size: String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .parse()
                .unwrap(),
        }
    }

    fn reading(&self) -> Reading {
        let tasks = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        // The process's sockets by inode; the directory's own descriptor is counted too,
        // before and after alike.
        let mut fds = 0;
        let mut sockets = std::collections::HashSet::new();
        for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
            fds += 1;
            let Ok(target) = std::fs::read_link(entry.unwrap().path()) else {
                continue;
            };
            if let Some(inode) = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
            {
                sockets.insert(inode.to_owned());
            }
        }
        let (mut home, mut member) = (0, 0);
        for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
            let Ok(text) = std::fs::read_to_string(table) else {
                continue;
            };
            for line in text.lines().skip(1) {
                let fields: Vec<&str> = line.split_whitespace().collect();
                // local, remote (hex address:port), state, .., inode.
                let (Some(remote), Some(inode)) = (fields.get(2), fields.get(9)) else {
                    continue;
                };
                if !sockets.contains(*inode) {
                    continue;
                }
                let port = remote
                    .rsplit_once(':')
                    .and_then(|(_, port)| u16::from_str_radix(port, 16).ok());
                if port == Some(self.home_port) {
                    home += 1;
                } else if port == Some(self.member_port) {
                    member += 1;
                }
            }
        }
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        let heap = GLOBAL.stats();
        Reading {
            tasks: tasks.saturating_sub(home),
            fds: fds - home,
            rss: pages * self.page_size,
            // A realloc is counted in `bytes_allocated` or `bytes_deallocated` by its
            // difference already (`bytes_reallocated` is the same difference again).
            heap: heap.bytes_allocated as isize - heap.bytes_deallocated as isize,
            home,
            member,
        }
    }
}

/// Reads `read` until `ok` holds or [`WITHIN`] has passed, and returns the last reading.
async fn settle<T: Copy>(
    what: &str,
    mut read: impl AsyncFnMut() -> T,
    ok: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + WITHIN;
    loop {
        let value = read().await;
        if ok(&value) || Instant::now() >= deadline {
            if !ok(&value) {
                eprintln!("{what}: not back within {WITHIN:?}");
            }
            return value;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The watches open on the member's API server, by its own gauge (read with a client of
/// its own, dropped with its connection).
async fn watches(member: &TestEnv) -> f64 {
    let page = member
        .client()
        .unwrap()
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    rudder_envtest::metrics::samples(&page, "apiserver_longrunning_requests")
        .into_iter()
        // Namespaced ConfigMap watches only: the API server's own informers (cluster-wide, and
        // re-opened on their own timeouts) would move a total by one at any moment.
        .filter(|(labels, _)| {
            (rudder_envtest::metrics::has_label(labels, "verb", "WATCH")
                || rudder_envtest::metrics::has_label(labels, "verb", "WATCHLIST"))
                && rudder_envtest::metrics::has_label(labels, "resource", "configmaps")
                && rudder_envtest::metrics::has_label(labels, "scope", "namespace")
        })
        .map(|(_, value)| value)
        .sum()
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    api.create(&PostParams::default(), &ns).await.unwrap();
}

/// The member's kubeconfig Secret, labelled for the default provider.
fn kubeconfig_secret(kubeconfig: &str) -> Secret {
    let (key, value) = DEFAULT_SECRET_LABEL.split_once('=').unwrap();
    Secret {
        metadata: ObjectMeta {
            name: Some(MEMBER.into()),
            labels: Some([(key.to_owned(), value.to_owned())].into()),
            ..ObjectMeta::default()
        },
        data: Some(
            [(
                DEFAULT_KUBECONFIG_KEY.to_owned(),
                k8s_openapi::ByteString(kubeconfig.as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Secret::default()
    }
}

/// Creates or updates the member's ConfigMap with `v`.
async fn put(client: &kube::Client, v: u32) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), WORK);
    let patch = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": OBJECT},
        "data": {"v": v.to_string()},
    });
    api.patch(
        OBJECT,
        &PatchParams::apply("fleet-cycles").force(),
        &Patch::Apply(&patch),
    )
    .await
    .unwrap();
}

/// Whether the member's ConfigMap carries the stamp for `v`.
async fn stamped(client: &kube::Client, v: u32) -> bool {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), WORK);
    let cm = api.get(OBJECT).await.unwrap();
    cm.metadata
        .annotations
        .unwrap_or_default()
        .get(SEEN_ANNOTATION)
        == Some(&v.to_string())
}
