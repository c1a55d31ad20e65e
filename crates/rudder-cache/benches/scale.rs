//! Informers at scale, each implementation in a process of its own, in turn, on one namespace
//! of objects created once before any is measured (the load generator stays off every
//! measured window).
//!
//! Two kinds (`--kind`): `configmaps` (100,000 by default, one 400-byte value each) and `pods`
//! (50,000 by default, shaped like real ones: two containers with env, ports, liveness and
//! readiness probes, resources and volume mounts, bound to a fake node, with a status of
//! conditions and container statuses written through the status subresource: 5.5 KB of JSON
//! each, 10.4 KB as the server returns them with the managedFields of its two writers). The
//! API server takes a Pod bound to a node that does not exist: nothing in the test control
//! plane checks nodes or schedules.
//!
//! The default set is the four of issue 39: Rudder's informer asking for protobuf (its
//! default; it reads JSON for a type without a generated decoder, and the `wire` column says
//! what it read), Rudder's informer asking for JSON, controller-runtime's cache (its
//! defaults) and kube-runtime's reflector (its default, paginated lists). `--full` adds
//! Rudder's paginated lists, kube-runtime's streaming lists, client-go's shared informer
//! (WatchListClient on and off, managedFields dropped, JSON on the wire) and Rudder's cache
//! informer released by its last user (resident memory before it was created, with it, and
//! after it stopped).
//!
//! Each row: the sync's wall time; the child's CPU time (user and system, every thread, from
//! `/proc/self/stat`) from the informer's start to its sync, and per object; resident memory
//! before the informer starts, at its peak until the sync (`VmHWM`) and after a settling time;
//! the bytes the API server sent over the sync (`wchar` of its `/proc/<pid>/io`, TLS records
//! and HTTP framing included; the child is its only client then, but for the control plane's
//! own few requests; a Rust child's socket reads are `recv` calls, which its own `rchar` does
//! not count, hence the server's side); and the API server's CPU time over the same window
//! (its `/proc/<pid>/stat`). The child reads both at the informer's start and at its sync.
//! Go's transport asks for gzip, and the API server compresses what it sends a Go child (its
//! bytes are compressed ones, and its CPU includes the compression); Rust's clients here do
//! not ask. The API server and the child share the machine's cores: on a small machine the
//! one's work slows the other's sync. Then the ratios of Rudder's rows to
//! controller-runtime's, beside the goals.
//!
//! `cargo xtask bench-informers` builds client-go's side (`go/cmd/informer-rss`) and runs
//! this; directly: `cargo bench -p rudder-cache --bench scale -- --bench [--kind
//! configmaps|pods] [--objects N[,N...]] [--runs N] [--settle S] [--full] [--go-binary PATH]
//! [--plot PATH] [--callgrind]` (without `--go-binary`, no Go rows). Several counts make a
//! sweep instead (Rudder, kube-runtime and controller-runtime at each count, the namespace
//! grown from one to the next). `--callgrind` runs Rudder's child (protobuf, then JSON) under
//! `valgrind --tool=callgrind` on the objects and on an empty namespace, and prints the
//! instructions per object synced (the difference over the object count). It needs the
//! envtest binaries, as the tests do.

#![allow(
    clippy::disallowed_methods,
    reason = "benches may spawn: the bench owns its tasks"
)]
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::cast_precision_loss
)]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube_runtime::watcher::{self, watcher};
use kube_runtime::{WatchStreamExt, reflector};
use rudder_cache::{Cache, Informer, ListStrategy, Scope, Typed, WireFormat};
use rudder_envtest::TestEnv;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Set in a child process: which implementation it runs.
const CHILD: &str = "RUDDER_SCALE_CHILD";
/// The objects' namespace, for a Rust child.
const NAMESPACE: &str = "RUDDER_SCALE_NAMESPACE";
/// How long a child waits after the sync before the steady reading, in seconds.
const SETTLE: &str = "RUDDER_SCALE_SETTLE";
/// The kind a Rust child syncs: `configmaps` or `pods`.
const KIND: &str = "RUDDER_SCALE_KIND";
/// The kube-apiserver's process id, whose CPU time a child reads at its start and its sync.
const APISERVER_PID: &str = "RUDDER_SCALE_APISERVER_PID";

/// The kinds the bench syncs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    ConfigMaps,
    Pods,
}

impl Kind {
    fn parse(name: &str) -> Self {
        match name {
            "configmaps" => Self::ConfigMaps,
            "pods" => Self::Pods,
            other => panic!("--kind {other}: configmaps or pods"),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMaps => "configmaps",
            Self::Pods => "pods",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Self::ConfigMaps => "ConfigMaps",
            Self::Pods => "Pods",
        }
    }

    /// The object count of the sitting.
    fn default_objects(self) -> usize {
        match self {
            Self::ConfigMaps => 100_000,
            Self::Pods => 50_000,
        }
    }
}

/// An implementation measured: its name in the table, and how to run it.
struct Run {
    name: &'static str,
    how: How,
    /// In the default set (issue 39's four); the others run with `--full`.
    default: bool,
}

enum How {
    /// This bench as a child, with `CHILD` set to the given mode.
    Rust(&'static str),
    /// client-go's program, with the WatchListClient feature on or off, managedFields dropped
    /// or kept, protobuf (client-go's default for built-in types) or JSON on the wire.
    Go {
        watch_list: bool,
        strip: bool,
        json: bool,
        controller_runtime: bool,
    },
}

/// Every implementation, in the table's order. The ratios are taken against
/// [`CONTROLLER_RUNTIME`].
const RUNS: [Run; 10] = [
    Run {
        name: "Rudder informer, protobuf asked (default; streaming list, drops managedFields)",
        how: How::Rust("rudder"),
        default: true,
    },
    Run {
        name: "Rudder informer, JSON (streaming list, drops managedFields)",
        how: How::Rust("rudder-json"),
        default: true,
    },
    Run {
        name: "controller-runtime v0.25.3 cache (its defaults: WatchListClient on, protobuf)",
        how: How::Go {
            watch_list: true,
            strip: false,
            json: false,
            controller_runtime: true,
        },
        default: true,
    },
    Run {
        name: "kube-runtime reflector (its default: paginated lists, JSON)",
        how: How::Rust("kube-runtime"),
        default: true,
    },
    Run {
        name: "Rudder informer, paginated lists",
        how: How::Rust("rudder-paginated"),
        default: false,
    },
    Run {
        name: "kube-runtime reflector, streaming list",
        how: How::Rust("kube-runtime-streaming"),
        default: false,
    },
    Run {
        name: "client-go informer, WatchListClient on (default; protobuf)",
        how: How::Go {
            watch_list: true,
            strip: false,
            json: false,
            controller_runtime: false,
        },
        default: false,
    },
    Run {
        name: "client-go informer, WatchListClient off (protobuf)",
        how: How::Go {
            watch_list: false,
            strip: false,
            json: false,
            controller_runtime: false,
        },
        default: false,
    },
    Run {
        name: "client-go informer, WatchListClient on, managedFields dropped (protobuf)",
        how: How::Go {
            watch_list: true,
            strip: true,
            json: false,
            controller_runtime: false,
        },
        default: false,
    },
    Run {
        name: "client-go informer, WatchListClient on, managedFields dropped, JSON as Rust's clients",
        how: How::Go {
            watch_list: true,
            strip: true,
            json: true,
            controller_runtime: false,
        },
        default: false,
    },
];

/// Rudder's default row, its JSON row and controller-runtime's row (indexes into [`RUNS`]).
const RUDDER: usize = 0;
const RUDDER_JSON: usize = 1;
const CONTROLLER_RUNTIME: usize = 2;

/// What the sweep (`--objects` with several counts) runs at each count: Rudder, kube-runtime
/// and controller-runtime as a user gets each by default (indexes into [`RUNS`]).
const SWEEP: [usize; 3] = [RUDDER, 3, CONTROLLER_RUNTIME];

/// A process's CPU time so far (user and system, every thread), in milliseconds, from
/// `/proc/<pid>/stat` (clock ticks of 10 ms), as client-go's program reads it; `pid` is
/// `self` or a number.
fn cpu_millis(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    // The fields after the command name, which ends with the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields[i].parse::<u64>().unwrap();
    (ticks(11) + ticks(12)) * 10
}

/// The bytes a process has written so far, to files and sockets (`wchar` of
/// `/proc/<pid>/io`): for the API server, what it sent its clients (TLS records and HTTP
/// framing included), and its few writes to etcd.
fn written_bytes(pid: &str) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/io: {e}"));
    io.lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("wchar in /proc/<pid>/io")
}

/// A field of `/proc/self/status`, in bytes.
fn status(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    kb * 1024
}

fn config_map(i: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("scale-{i:06}")),
            ..Default::default()
        },
        data: Some([("value".to_owned(), "x".repeat(400))].into()),
        ..Default::default()
    }
}

/// A Pod as a Deployment's ReplicaSet makes one and a kubelet runs it: an application
/// container and a sidecar, bound to one of 100 fake nodes.
fn pod(i: usize) -> Pod {
    let name = format!("scale-{i:06}");
    let container = |name: &str, image: &str, port: u16| {
        json!({
            "name": name,
            "image": image,
            "args": ["--listen=:".to_owned() + &port.to_string(), "--log-format=json"],
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "LOG_LEVEL", "value": "info"},
            ],
            "ports": [
                {"name": "http", "containerPort": port, "protocol": "TCP"},
                {"name": "metrics", "containerPort": port + 1000, "protocol": "TCP"},
            ],
            "livenessProbe": {
                "httpGet": {"path": "/healthz", "port": port, "scheme": "HTTP"},
                "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3,
            },
            "readinessProbe": {
                "httpGet": {"path": "/readyz", "port": port, "scheme": "HTTP"},
                "periodSeconds": 5, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3,
            },
            "resources": {
                "requests": {"cpu": "250m", "memory": "256Mi"},
                "limits": {"cpu": "1", "memory": "512Mi"},
            },
            "volumeMounts": [
                {"name": "config", "mountPath": "/etc/app", "readOnly": true},
                {"name": "cache", "mountPath": "/var/cache/app"},
                {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
            ],
        })
    };
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"app": "orders", "tier": "web", "pod-template-hash": "7c9d8f6b5d"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "orders-7c9d8f6b5d",
                "uid": "6b1f4e3a-2d5c-4f8e-9a7b-1c2d3e4f5a6b", "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "nodeName": format!("scale-node-{:03}", i % 100),
            "serviceAccountName": "default",
            "containers": [
                container("orders", "registry.example.com/shop/orders:v1.42.3", 8080),
                container("proxy", "registry.example.com/mesh/proxy:v2.7.1", 15001),
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": "orders-config"}},
                {"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "kube-api-access", "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                ]}},
            ],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
    }))
    .unwrap()
}

/// The status a kubelet writes for [`pod`]: running, ready, both containers started.
fn pod_status(i: usize) -> serde_json::Value {
    let at = "2026-12-01T10:00:00Z";
    let ip = format!("10.{}.{}.{}", 1 + i / 65_536 % 200, i / 256 % 256, i % 256);
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": at});
    let container = |name: &str, image: &str| {
        json!({
            "name": name, "ready": true, "started": true, "restartCount": 0,
            "image": image,
            "imageID": format!("{image}@sha256:{}", "3f9a".repeat(16)),
            "containerID": format!("containerd://{:064x}", i),
            "state": {"running": {"startedAt": at}},
        })
    };
    json!({"status": {
        "phase": "Running",
        "conditions": [
            condition("PodReadyToStartContainers"), condition("Initialized"), condition("Ready"),
            condition("ContainersReady"), condition("PodScheduled"),
        ],
        "hostIP": format!("192.168.0.{}", 10 + i % 100),
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": at, "qosClass": "Burstable",
        "containerStatuses": [
            container("orders", "registry.example.com/shop/orders:v1.42.3"),
            container("proxy", "registry.example.com/mesh/proxy:v2.7.1"),
        ],
    }})
}

/// The child's side: sync with `which` and print the figures as client-go's program does.
async fn child(which: &str) {
    match Kind::parse(&std::env::var(KIND).unwrap()) {
        Kind::ConfigMaps => child_of::<ConfigMap>(which).await,
        Kind::Pods => child_of::<Pod>(which).await,
    }
}

async fn child_of<K>(which: &str)
where
    K: Typed + kube::Resource<Scope = NamespaceResourceScope>,
{
    let namespace = std::env::var(NAMESPACE).unwrap();
    let settle = Duration::from_secs(std::env::var(SETTLE).unwrap().parse().unwrap());
    let apiserver = std::env::var(APISERVER_PID).unwrap();
    let client = kube::Client::try_default().await.unwrap();
    let api: Api<K> = Api::namespaced(client.clone(), &namespace);
    // One request first, so the connection and the client's own buffers are in the baseline.
    api.list(&kube::api::ListParams::default().limit(1))
        .await
        .unwrap();
    let base = status("VmRSS");
    let sent = written_bytes(&apiserver);
    let server = cpu_millis(&apiserver);
    let cpu = cpu_millis("self");
    let start = Instant::now();
    let figures = |objects: usize, took: Duration| {
        // The CPU and the bytes first, before this reads more of /proc.
        let (cpu, server, sent) = (
            cpu_millis("self") - cpu,
            cpu_millis(&apiserver) - server,
            written_bytes(&apiserver) - sent,
        );
        let (peak, synced) = (status("VmHWM"), status("VmRSS"));
        println!("objects {objects}");
        println!("sync-ms {}", took.as_millis());
        println!("cpu-ms {cpu}");
        println!("apiserver-sent-bytes {sent}");
        println!("apiserver-cpu-ms {server}");
        println!("base {base}\npeak {peak}\nsynced {synced}");
    };
    match which {
        "rudder" | "rudder-json" | "rudder-paginated" => {
            let strategy = if which == "rudder-paginated" {
                ListStrategy::Paginated
            } else {
                ListStrategy::Streaming
            };
            let wire = if which == "rudder-json" {
                WireFormat::Json
            } else {
                WireFormat::Protobuf
            };
            let informer = Informer::builder(api)
                .list_strategy(strategy)
                .wire_format(wire)
                .start();
            informer
                .wait_for_sync(Duration::from_secs(1800))
                .await
                .unwrap();
            figures(informer.store().len(), start.elapsed());
            println!("wire {}", informer.stats().wire_format.as_str());
            eprintln!("{which}: listed with {}", informer.list_strategy().as_str());
            tokio::time::sleep(settle).await;
            println!("steady {}", status("VmRSS"));
            // Out without dropping the informer: what `--callgrind` counts is then the sync
            // alone, as `cpu-ms` is, and not the freeing of every stored object at the end
            // (an eighth of a Pod's instructions, which no other implementation here pays).
            std::process::exit(0);
        }
        "kube-runtime" | "kube-runtime-streaming" => {
            let mut config = watcher::Config::default();
            if which == "kube-runtime-streaming" {
                config = config.streaming_lists();
            }
            let (reader, writer) = reflector::store::<K>();
            let events = watcher(api, config).default_backoff();
            let task = tokio::spawn(reflector(writer, events).for_each(|_| async {}));
            reader.wait_until_ready().await.unwrap();
            figures(reader.state().len(), start.elapsed());
            println!("wire json");
            tokio::time::sleep(settle).await;
            println!("steady {}", status("VmRSS"));
            task.abort();
        }
        "rudder-released" => {
            let cache = Cache::builder(client).build(&CancellationToken::new());
            let held = cache.acquire::<K>(&Scope::namespace(&namespace)).unwrap();
            held.wait_for_sync(Duration::from_secs(1800)).await.unwrap();
            figures(held.store().len(), start.elapsed());
            tokio::time::sleep(settle).await;
            println!("steady {}", status("VmRSS"));
            let informer = held.informer().clone();
            drop(held);
            let stopped = Instant::now();
            while informer.is_running() {
                assert!(stopped.elapsed() < Duration::from_secs(30), "still running");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(cache.informer_count(), 0);
            drop(informer);
            tokio::time::sleep(settle).await;
            println!("released {}", status("VmRSS"));
            cache.stop().await;
        }
        other => panic!("unknown implementation {other}"),
    }
}

/// What a child printed.
type Figures = HashMap<String, String>;

fn parse(text: &str) -> Figures {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn number(figures: &Figures, key: &str) -> f64 {
    figures
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {figures:?}"))
}

/// The kube-apiserver's process id in `env`.
fn apiserver_pid(env: &TestEnv) -> u32 {
    env.pids()
        .into_iter()
        .find(|(name, _)| *name == "kube-apiserver")
        .map(|(_, pid)| pid)
        .expect("a kube-apiserver process in the test environment")
}

/// The command running one implementation's child, with `settle` seconds of settling.
fn command(how: &How, env: &TestEnv, namespace: &str, settings: &Settings) -> Command {
    let apiserver = apiserver_pid(env).to_string();
    let mut command = match how {
        How::Rust(mode) => {
            let mut command = Command::new(std::env::current_exe().unwrap());
            command
                .arg("--bench")
                .env(CHILD, mode)
                .env(NAMESPACE, namespace)
                .env(KIND, settings.kind.as_str())
                .env(APISERVER_PID, &apiserver)
                .env(SETTLE, settings.settle.to_string());
            command
        }
        How::Go {
            watch_list,
            strip,
            json,
            controller_runtime,
        } => {
            let mut command = Command::new(settings.go_binary.as_ref().unwrap());
            command
                .arg("-kubeconfig")
                .arg(env.kubeconfig_path())
                .arg("-namespace")
                .arg(namespace)
                .arg(format!("-kind={}", settings.kind.as_str()))
                .arg(format!("-apiserver-pid={apiserver}"))
                .arg(format!("-settle={}s", settings.settle))
                .arg(format!("-strip={strip}"))
                .arg(format!("-json={json}"))
                .arg(format!("-controller-runtime={controller_runtime}"))
                .env("KUBE_FEATURE_WatchListClient", watch_list.to_string());
            command
        }
    };
    command.env("KUBECONFIG", env.kubeconfig_path());
    command
}

/// Runs one implementation in a process of its own; what it printed.
fn measure(how: &How, env: &TestEnv, namespace: &str, settings: &Settings) -> Figures {
    let output = command(how, env, namespace, settings)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "a child failed: {output:?}");
    let figures = parse(&String::from_utf8_lossy(&output.stdout));
    assert_eq!(
        number(&figures, "objects") as usize,
        settings.objects,
        "{figures:?}"
    );
    figures
}

#[derive(Clone)]
struct Settings {
    kind: Kind,
    /// The object count of the table, or the counts of the sweep.
    counts: Vec<usize>,
    /// Where the sweep draws its plot.
    plot: Option<PathBuf>,
    objects: usize,
    runs: usize,
    settle: u64,
    /// Every implementation, not only issue 39's four.
    full: bool,
    /// Instructions per object under callgrind instead of the table.
    callgrind: bool,
    go_binary: Option<PathBuf>,
}

fn settings() -> Settings {
    let mut settings = Settings {
        kind: Kind::ConfigMaps,
        counts: Vec::new(),
        plot: None,
        objects: 0,
        runs: 1,
        settle: 10,
        full: false,
        callgrind: false,
        go_binary: None,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        let mut value = || {
            rest.next()
                .unwrap_or_else(|| panic!("{arg} needs a value"))
                .clone()
        };
        match arg.as_str() {
            "--kind" => settings.kind = Kind::parse(&value()),
            "--objects" => {
                settings.counts = value().split(',').map(|n| n.parse().unwrap()).collect();
            }
            "--plot" => settings.plot = Some(PathBuf::from(value())),
            "--runs" => settings.runs = value().parse().unwrap(),
            "--settle" => settings.settle = value().parse().unwrap(),
            "--go-binary" => settings.go_binary = Some(PathBuf::from(value())),
            "--full" => settings.full = true,
            "--callgrind" => settings.callgrind = true,
            _ => {}
        }
    }
    if settings.counts.is_empty() {
        settings.counts = vec![settings.kind.default_objects()];
    }
    settings.objects = settings.counts[0];
    settings
}

fn mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Creates objects `from..to` of the settings' kind in `namespace`, 64 requests in flight;
/// a Pod's status is written through its status subresource, as a kubelet writes it.
async fn create(env: &TestEnv, namespace: &str, kind: Kind, from: usize, to: usize) {
    let client = env.client().unwrap();
    futures::stream::iter(from..to)
        .map(|i| {
            let client = client.clone();
            async move {
                match kind {
                    Kind::ConfigMaps => {
                        Api::<ConfigMap>::namespaced(client, namespace)
                            .create(&PostParams::default(), &config_map(i))
                            .await
                            .unwrap();
                    }
                    Kind::Pods => {
                        let api = Api::<Pod>::namespaced(client, namespace);
                        let pod = api.create(&PostParams::default(), &pod(i)).await.unwrap();
                        api.patch_status(
                            pod.metadata.name.as_deref().unwrap(),
                            &PatchParams::default(),
                            &Patch::Merge(pod_status(i)),
                        )
                        .await
                        .unwrap();
                    }
                }
            }
        })
        .buffer_unordered(64)
        .for_each(|()| async {})
        .await;
}

/// The size of the first object's JSON as the server returns it, with its managedFields and
/// without.
async fn sample_size(env: &TestEnv, namespace: &str, kind: Kind) -> (usize, usize) {
    fn sizes<K: serde::Serialize + kube::Resource>(mut object: K) -> (usize, usize) {
        let whole = serde_json::to_vec(&object).unwrap().len();
        object.meta_mut().managed_fields = None;
        (whole, serde_json::to_vec(&object).unwrap().len())
    }
    let client = env.client().unwrap();
    let name = "scale-000000";
    match kind {
        Kind::ConfigMaps => {
            let object = Api::<ConfigMap>::namespaced(client, namespace)
                .get(name)
                .await
                .unwrap();
            sizes(object)
        }
        Kind::Pods => {
            let object = Api::<Pod>::namespaced(client, namespace)
                .get(name)
                .await
                .unwrap();
            assert_eq!(
                object.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Running"),
                "the status written"
            );
            sizes(object)
        }
    }
}

/// A ratio `a / b` as `0.42x`.
fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".to_owned()
    }
}

async fn run() {
    let settings = settings();
    if settings.counts.len() > 1 {
        return sweep(settings).await;
    }
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("scale").await.unwrap();
    let created = Instant::now();
    create(env, ns.name(), settings.kind, 0, settings.objects).await;
    let (json, bare) = sample_size(env, ns.name(), settings.kind).await;
    println!(
        "{} {} created in {:.1?} ({json} bytes of JSON each as the server returns them, \
         {bare} without managedFields); \
         kube-apiserver {} on {} cores (the children share them)",
        settings.objects,
        settings.kind.title(),
        created.elapsed(),
        env.version(),
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
    );
    if settings.callgrind {
        return callgrind(env, ns.name(), &settings).await;
    }
    let runs: Vec<usize> = (0..RUNS.len())
        .filter(|&r| RUNS[r].default || settings.full)
        .filter(|&r| matches!(RUNS[r].how, How::Rust(_)) || settings.go_binary.is_some())
        .collect();
    for sitting in 1..=settings.runs {
        let load_before = load_average();
        let mut rows: BTreeMap<usize, Figures> = BTreeMap::new();
        // Rotate the order between sittings, so no implementation always runs first.
        for i in 0..runs.len() {
            let run = runs[(i + sitting - 1) % runs.len()];
            eprintln!("sitting {sitting}: {}", RUNS[run].name);
            rows.insert(run, measure(&RUNS[run].how, env, ns.name(), &settings));
        }
        println!();
        println!(
            "Sitting {sitting} of {}: {} {}, settle {} s, load average before {load_before}, after {}",
            settings.runs,
            settings.objects,
            settings.kind.title(),
            settings.settle,
            load_average()
        );
        println!();
        println!(
            "| implementation | wire | sync | CPU to sync | CPU per object | RSS before | peak until synced | steady RSS | bytes sent by the API server | API server CPU |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (&run, f) in &rows {
            let cpu = number(f, "cpu-ms");
            println!(
                "| {} | {} | {:.2} s | {:.2} s | {:.1} µs | {} | {} | {} | {} | {:.2} s |",
                RUNS[run].name,
                f.get("wire").map_or("-", String::as_str),
                number(f, "sync-ms") / 1000.0,
                cpu / 1000.0,
                cpu * 1000.0 / settings.objects as f64,
                mb(number(f, "base")),
                mb(number(f, "peak")),
                mb(number(f, "steady")),
                mb(number(f, "apiserver-sent-bytes")),
                number(f, "apiserver-cpu-ms") / 1000.0,
            );
        }
        if let Some(anchor) = rows.get(&CONTROLLER_RUNTIME) {
            println!();
            println!("Against controller-runtime's row (issue 39's goals):");
            println!();
            println!(
                "| ratio to controller-runtime | Rudder, protobuf asked | Rudder, JSON | goal | Rudder (protobuf asked) meets it |"
            );
            println!("|---|---:|---:|---:|---|");
            let measures: [(&str, &str, f64); 4] = [
                ("CPU to sync", "cpu-ms", 0.5),
                ("sync wall time", "sync-ms", 0.8),
                ("steady RSS", "steady", 0.7),
                ("API server CPU", "apiserver-cpu-ms", 1.0),
            ];
            for (title, key, goal) in measures {
                let of = |run: usize| rows.get(&run).map(|f| number(f, key) / number(anchor, key));
                let shown =
                    |r: Option<f64>| r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x"));
                println!(
                    "| {title} | {} | {} | <= {goal:.1}x | {} |",
                    shown(of(RUDDER)),
                    shown(of(RUDDER_JSON)),
                    of(RUDDER).map_or("-", |r| if r <= goal { "yes" } else { "no" }),
                );
            }
        }
        if settings.full {
            released(env, ns.name(), &settings);
        }
    }
}

/// Rudder's cache informer released by its last user: resident memory before, with it, after.
fn released(env: &TestEnv, namespace: &str, settings: &Settings) {
    let released = measure(&How::Rust("rudder-released"), env, namespace, settings);
    let (base, steady, after) = (
        number(&released, "base"),
        number(&released, "steady"),
        number(&released, "released"),
    );
    println!();
    println!(
        "Rudder's cache informer released by its last use: RSS before it was created {}, with it {}, \
         {} s after it stopped {} ({} of before)",
        mb(base),
        mb(steady),
        settings.settle,
        mb(after),
        ratio(after, base)
    );
}

/// Instructions (callgrind's `Ir`) of Rudder's child, per wire format asked, syncing the
/// objects and syncing an empty namespace; the difference over the object count is what a
/// sync spends per object, the process's start and its client's setup left out.
async fn callgrind(env: &TestEnv, namespace: &str, settings: &Settings) {
    let empty = env.namespace("scale-empty").await.unwrap();
    let dir = std::env::temp_dir().join(format!("rudder-scale-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let quiet = Settings {
        settle: 0,
        ..settings.clone()
    };
    println!();
    println!(
        "| Rudder, wire asked | wire read | Ir syncing {} | Ir, empty namespace | Ir per object | callgrind output |",
        settings.objects
    );
    println!("|---|---|---:|---:|---:|---|");
    for mode in ["rudder", "rudder-json"] {
        let mut totals = Vec::new();
        let mut wire = String::new();
        for (ns, label) in [(namespace, "full"), (empty.name(), "empty")] {
            let out = dir.join(format!("callgrind.out.{mode}.{label}"));
            let child = command(&How::Rust(mode), env, ns, &quiet);
            let output = Command::new("valgrind")
                .arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}", out.display()))
                .arg(child.get_program())
                .args(child.get_args())
                .envs(
                    child
                        .get_envs()
                        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))),
                )
                .stderr(Stdio::null())
                .output()
                .expect("valgrind (is it installed?)");
            assert!(output.status.success(), "valgrind failed: {output:?}");
            let figures = parse(&String::from_utf8_lossy(&output.stdout));
            wire = figures.get("wire").cloned().unwrap_or_default();
            let text = std::fs::read_to_string(&out).unwrap();
            let total: f64 = text
                .lines()
                .find_map(|l| {
                    l.strip_prefix("totals:")
                        .or_else(|| l.strip_prefix("summary:"))
                })
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .expect("a totals line in callgrind's output");
            totals.push(total);
        }
        println!(
            "| {} | {wire} | {:.0} | {:.0} | {:.0} | {} |",
            if mode == "rudder" { "protobuf" } else { "json" },
            totals[0],
            totals[1],
            (totals[0] - totals[1]) / settings.objects as f64,
            dir.join(format!("callgrind.out.{mode}.full")).display()
        );
    }
}

/// One point of the sweep: an implementation's sync time and steady RSS at a count.
struct Point {
    run: usize,
    objects: usize,
    sync: f64,
    cpu: f64,
    steady: f64,
}

/// Sync time and steady RSS against the object count for Rudder, kube-runtime and
/// controller-runtime, the namespace grown from one count to the next; a table, and a plot
/// where `--plot` says.
async fn sweep(mut settings: Settings) {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("scale-sweep").await.unwrap();
    let counts = settings.counts.clone();
    let mut points = Vec::new();
    let mut made = 0;
    let load_before = load_average();
    for &count in &counts {
        create(env, ns.name(), settings.kind, made, count).await;
        made = count;
        settings.objects = count;
        for &run in &SWEEP {
            if matches!(RUNS[run].how, How::Go { .. }) && settings.go_binary.is_none() {
                continue;
            }
            eprintln!("{count} objects: {}", RUNS[run].name);
            let f = measure(&RUNS[run].how, env, ns.name(), &settings);
            points.push(Point {
                run,
                objects: count,
                sync: number(&f, "sync-ms") / 1000.0,
                cpu: number(&f, "cpu-ms") / 1000.0,
                steady: number(&f, "steady"),
            });
        }
    }
    println!();
    println!(
        "{}: sync time, CPU to sync and steady RSS against the object count (settle {} s, load average before {load_before}, after {}):",
        settings.kind.title(),
        settings.settle,
        load_average()
    );
    println!();
    println!("| implementation | objects | sync | CPU to sync | steady RSS |");
    println!("|---|---:|---:|---:|---:|");
    for p in &points {
        println!(
            "| {} | {} | {:.2} s | {:.2} s | {} |",
            RUNS[p.run].name,
            p.objects,
            p.sync,
            p.cpu,
            mb(p.steady)
        );
    }
    if let Some(path) = &settings.plot {
        std::fs::write(path, svg(&points)).unwrap();
        println!();
        println!("plot: {}", path.display());
    }
}

/// Two panels, sync time and steady RSS against the object count (both axes logarithmic),
/// one line per implementation.
fn svg(points: &[Point]) -> String {
    const W: f64 = 420.0;
    const H: f64 = 300.0;
    const PAD: f64 = 55.0;
    const COLOURS: [&str; 3] = ["#1f77b4", "#d62728", "#2ca02c"];
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <!-- generated by cargo xtask bench-informers with several object counts; do not edit -->\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        2.0 * W,
        H + 60.0
    );
    type Panel = (&'static str, fn(&Point) -> f64);
    let panels: [Panel; 2] = [
        ("sync time (s)", |p| p.sync),
        ("steady RSS (MB)", |p| p.steady / 1e6),
    ];
    let log = |v: f64| v.max(1e-3).log10();
    let (x_min, x_max) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
        (a.min(log(p.objects as f64)), b.max(log(p.objects as f64)))
    });
    for (panel, (title, value)) in panels.iter().enumerate() {
        let left = panel as f64 * W;
        let (y_min, y_max) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
            (a.min(log(value(p))), b.max(log(value(p))))
        });
        let x =
            |v: f64| left + PAD + (log(v) - x_min) / (x_max - x_min).max(1e-9) * (W - 1.5 * PAD);
        let y = |v: f64| H - (log(v) - y_min) / (y_max - y_min).max(1e-9) * (H - 1.5 * PAD);
        out += &format!(
            "<text x=\"{}\" y=\"18\" font-size=\"13\">{title}, against objects (log-log)</text>\n\
             <line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n\
             <line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"30\" stroke=\"black\"/>\n",
            left + PAD,
            H,
            left + W - PAD / 2.0,
        );
        let mut counts: Vec<usize> = points.iter().map(|p| p.objects).collect();
        counts.dedup();
        for count in counts {
            out += &format!(
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{count}</text>\n",
                x(count as f64),
                H + 15.0
            );
        }
        for v in [y_min, (y_min + y_max) / 2.0, y_max] {
            let value = 10f64.powf(v);
            out += &format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{value:.2}</text>\n",
                left + PAD - 4.0,
                y(value) + 4.0
            );
        }
        for (line, &run) in SWEEP.iter().enumerate() {
            let coords: Vec<String> = points
                .iter()
                .filter(|p| p.run == run)
                .map(|p| format!("{:.1},{:.1}", x(p.objects as f64), y(value(p))))
                .collect();
            if coords.is_empty() {
                continue;
            }
            out += &format!(
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n",
                COLOURS[line],
                coords.join(" ")
            );
        }
    }
    for (line, &run) in SWEEP.iter().enumerate() {
        out += &format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n",
            PAD,
            H + 32.0 + 14.0 * line as f64,
            COLOURS[line],
            RUNS[run].name
        );
    }
    out += "</svg>\n";
    out
}

fn main() {
    // `cargo test` runs bench targets without `--bench`; only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // A child runs on the runtime an operator's `#[tokio::main]` gives it: a thread per core
    // (client-go's program has GOMAXPROCS threads likewise).
    let rt = match std::env::var_os(CHILD) {
        Some(_) => tokio::runtime::Builder::new_multi_thread(),
        None => tokio::runtime::Builder::new_current_thread(),
    }
    .enable_all()
    .build()
    .unwrap();
    match std::env::var(CHILD) {
        Ok(which) => rt.block_on(child(&which)),
        Err(_) => rt.block_on(run()),
    }
}
