//! A fleet over three real control planes in one process: clusters that join and leave as
//! kubeconfig Secrets come and go, a member's API server killed and restarted, frozen and
//! thawed, a member's credentials revoked, two replicas sharing the clusters without
//! overlap, and a stop that leaves nothing of the fleet running.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

// The facade's test helpers, one module for both crates' tests.
#[path = "../../rudder/tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use rudder::multicluster::{
    ClusterHealth, DEFAULT_KUBECONFIG_KEY, Fleet, KubeconfigSecrets, StaticClusters,
};
use rudder::prelude::*;
use rudder_envtest::TestEnv;
use rudder_envtest::poll::{eventually, until};
use tokio::time::Instant;

/// The namespace every member's ConfigMaps live in.
const WORK: &str = "work";
/// Where the kubeconfig Secrets live on the home cluster.
const FLEET_NS: &str = "fleet-system";
const CLUSTER_ANNOTATION: &str = "fleet.rudder.dev/cluster";
const SEEN_ANNOTATION: &str = "fleet.rudder.dev/seen";
const WITHIN: Duration = Duration::from_secs(60);

/// The two tests start three control planes each; one at a time is enough for two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// (replica, cluster, object, start, end) of every reconcile.
type Log = Arc<Mutex<Vec<(&'static str, String, String, Instant, Instant)>>>;

/// Stamps each ConfigMap with the cluster that reconciled it and the value of its `v` key,
/// through the cluster's own client.
struct Stamp {
    tools: Tools,
    who: &'static str,
    log: Log,
}

impl Reconciler for Stamp {
    type Error = kube::Error;

    async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Self::Error> {
        let start = Instant::now();
        let cluster = ctx
            .cluster()
            .expect("a fleet's reconcile names its cluster");
        assert_eq!(self.tools.cluster(), Some(cluster));
        let cached = self.tools.get::<ConfigMap>(&request).await.unwrap();
        if let Some(cm) = cached {
            let v = cm
                .data
                .as_ref()
                .and_then(|d| d.get("v"))
                .cloned()
                .unwrap_or_default();
            let annotations = cm.metadata.annotations.clone().unwrap_or_default();
            if annotations.get(CLUSTER_ANNOTATION).map(String::as_str) != Some(cluster)
                || annotations.get(SEEN_ANNOTATION) != Some(&v)
            {
                let api: Api<ConfigMap> = Api::namespaced(self.tools.kube().clone(), WORK);
                let patch = serde_json::json!({"metadata": {"annotations": {
                    CLUSTER_ANNOTATION: cluster,
                    SEEN_ANNOTATION: v,
                }}});
                api.patch(
                    request.name(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
            }
        }
        self.log.lock().unwrap().push((
            self.who,
            cluster.to_owned(),
            request.name().to_owned(),
            start,
            Instant::now(),
        ));
        Ok(Action::done())
    }
}

/// Three control planes, started side by side, each with the `work` namespace.
async fn three_planes() -> Vec<TestEnv> {
    let (a, b, c) = tokio::join!(TestEnv::start(), TestEnv::start(), TestEnv::start());
    let envs = vec![a.unwrap(), b.unwrap(), c.unwrap()];
    for env in &envs {
        create_namespace(&env.client().unwrap(), WORK).await;
    }
    envs
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

/// `env`'s kubeconfig, acting with `token` instead of the admin's when given.
fn kubeconfig(env: &TestEnv, token: Option<&str>) -> String {
    let text = std::fs::read_to_string(env.kubeconfig_path()).unwrap();
    let Some(token) = token else {
        return text;
    };
    let mut config = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    for user in &mut config.auth_infos {
        let auth = user.auth_info.as_mut().unwrap();
        auth.token = Some(token.to_owned().into());
    }
    serde_yaml::to_string(&config).unwrap()
}

/// A kubeconfig Secret for the cluster `name`, labelled for the default provider.
fn kubeconfig_secret(name: &str, kubeconfig: &str) -> Secret {
    let (key, value) = rudder::multicluster::DEFAULT_SECRET_LABEL
        .split_once('=')
        .unwrap();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
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

/// Creates or updates the ConfigMap `name` in `work` with `v`.
async fn put(client: &kube::Client, name: &str, v: u32) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), WORK);
    let patch = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"v": v.to_string()},
    });
    api.patch(
        name,
        &PatchParams::apply("fleet-test").force(),
        &Patch::Apply(&patch),
    )
    .await
    .unwrap();
}

/// Whether `name` in `work` carries the stamp of `cluster` for `v`.
async fn stamped(client: &kube::Client, name: &str, cluster: &str, v: u32) -> bool {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), WORK);
    let Ok(cm) = api.get(name).await else {
        return false;
    };
    let annotations: BTreeMap<String, String> = cm.metadata.annotations.unwrap_or_default();
    annotations.get(CLUSTER_ANNOTATION).map(String::as_str) == Some(cluster)
        && annotations.get(SEEN_ANNOTATION) == Some(&v.to_string())
}

/// Writes `v` into `name` in each of `clusters` at once and returns how long each took to be
/// stamped, in their order.
async fn converge(clusters: &[(&str, kube::Client)], name: &str, v: u32) -> Vec<Duration> {
    let start = Instant::now();
    for (_, client) in clusters {
        put(client, name, v).await;
    }
    let mut took = Vec::new();
    for (cluster, client) in clusters {
        eventually(
            &format!("{name}={v} stamped in {cluster}"),
            WITHIN,
            async || stamped(client, name, cluster, v).await.then_some(()),
        )
        .await;
        took.push(start.elapsed());
    }
    took
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

async fn ready(manager: &Manager) -> bool {
    let addr = manager.health_address().unwrap();
    support::get(addr, "/readyz").await.0 == 200
}

#[tokio::test]
async fn a_fleet_follows_its_secrets_and_keeps_faults_in_their_cluster() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut envs = Box::pin(three_planes()).await;
    let clients: Vec<kube::Client> = envs.iter().map(|e| e.client().unwrap()).collect();
    let home = clients[0].clone();
    create_namespace(&home, FLEET_NS).await;
    let secrets: Api<Secret> = Api::namespaced(home.clone(), FLEET_NS);
    for (i, name) in ["c0", "c1"].into_iter().enumerate() {
        let secret = kubeconfig_secret(name, &kubeconfig(&envs[i], None));
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    // c2 is reached as a ServiceAccount with cluster-admin, so that its credentials can be
    // revoked later.
    let member_ns = envs[2].namespace("member").await.unwrap();
    let user = member_ns.service_account("fleet").await.unwrap();
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some("fleet-member".into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: "cluster-admin".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: user.name().into(),
            namespace: Some(user.namespace().into()),
            ..Subject::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(clients[2].clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let manager = Arc::new(
        Manager::builder(home.clone())
            .health_probe_address(Some(loopback))
            .metrics_address(Some(loopback))
            .build()
            .unwrap(),
    );
    let fleet = Fleet::builder(&manager)
        .kubeconfig_secrets(KubeconfigSecrets::new(FLEET_NS))
        .cache(|cache| cache.default_namespace(WORK))
        .probe_every(Duration::from_millis(500))
        .build()
        .unwrap();
    let log: Log = Arc::default();
    fleet
        .new_controller()
        .for_::<ConfigMap>()
        .named("stamp")
        .complete_with({
            let log = Arc::clone(&log);
            move |tools| Stamp {
                tools,
                who: "only",
                log: Arc::clone(&log),
            }
        })
        .unwrap();
    // The provider's permissions are the manager's.
    let rules = manager.permissions();
    let scope = rudder::manager::rbac::RuleScope::Namespace(FLEET_NS.to_owned());
    assert!(rules.allows(&scope, "", "secrets", rudder::manager::rbac::Verb::Watch));
    let running = support::start(&manager);

    // Every object is reconciled by its own cluster's client.
    let members: Vec<(&str, kube::Client)> =
        vec![("c0", clients[0].clone()), ("c1", clients[1].clone())];
    converge(&members, "a", 1).await;
    assert_eq!(fleet.engaged(), ["c0", "c1"]);

    // A Secret whose kubeconfig is garbage is counted and changes nothing.
    secrets
        .create(
            &PostParams::default(),
            &kubeconfig_secret("junk", "clusters: [[["),
        )
        .await
        .unwrap();

    // A cluster joins: its Secret is created, and it is served within seconds.
    put(&clients[2], "a", 1).await;
    let joined = Instant::now();
    secrets
        .create(
            &PostParams::default(),
            &kubeconfig_secret("c2", &kubeconfig(&envs[2], Some(user.token()))),
        )
        .await
        .unwrap();
    eventually("c2 served", WITHIN, async || {
        stamped(&clients[2], "a", "c2", 1).await.then_some(())
    })
    .await;
    let join_took = joined.elapsed();
    eprintln!("secret created -> first object of c2 stamped: {join_took:?}");
    assert!(
        join_took < Duration::from_secs(15),
        "c2 took {join_took:?} to be served"
    );
    assert_eq!(fleet.engaged(), ["c0", "c1", "c2"]);
    // No object was ever stamped by another cluster's instance.
    for (_, cluster, _, _, _) in log.lock().unwrap().iter() {
        assert!(["c0", "c1", "c2"].contains(&cluster.as_str()));
    }

    // One member's API server killed: the others converge at the rate they did before.
    let healthy: Vec<(&str, kube::Client)> =
        vec![("c0", clients[0].clone()), ("c2", clients[2].clone())];
    let mut before = Vec::new();
    for v in 2..7 {
        before.extend(converge(&healthy, "a", v).await);
    }
    envs[1].stop_apiserver().unwrap();
    let c1 = fleet.cluster("c1").unwrap();
    until("c1 seen unreachable", WITHIN, || {
        c1.health() == ClusterHealth::Unreachable
    })
    .await;
    let mut during = Vec::new();
    for v in 7..12 {
        during.extend(converge(&healthy, "a", v).await);
        assert!(
            ready(&manager).await,
            "a member down made the manager unready"
        );
    }
    let (before, during) = (median(before), median(during));
    eprintln!("convergence p50 with c1 up {before:?}, with c1 down {during:?}");
    assert!(
        // A member that blocked the others would cost them its request timeout (seconds);
        // the margin is for two busy cores running three API servers.
        during <= before * 3 + Duration::from_secs(1),
        "the others slowed down while c1 was down: p50 {before:?} before, {during:?} during"
    );
    // It comes back, and its keys converge.
    envs[1].start_apiserver().await.unwrap();
    converge(&[("c1", clients[1].clone())], "a", 12).await;
    until("c1 answering", WITHIN, || {
        c1.health() == ClusterHealth::Healthy
    })
    .await;

    // Revoked credentials on c2: counted (and logged), the others unaffected.
    Api::<ServiceAccount>::namespaced(clients[2].clone(), user.namespace())
        .delete(user.name(), &DeleteParams::default())
        .await
        .unwrap();
    let c2 = fleet.cluster("c2").unwrap();
    // A watch already open stays open; the fleet's probe (every 500 ms here) is refused
    // once the API server's token cache lets go of the deleted account (about 10 s).
    until("c2's credentials refused", WITHIN, || {
        c2.health() == ClusterHealth::Unauthorized
    })
    .await;
    let metrics = manager.metrics_address().unwrap();
    let page = rudder_envtest::least_privilege::scrape(metrics)
        .await
        .unwrap();
    let refused = page
        .lines()
        .find(|l| {
            l.starts_with("rudder_fleet_cluster_request_failures_total")
                && l.contains("cluster=\"c2\"")
                && l.contains("reason=\"unauthorized\"")
        })
        .unwrap_or_else(|| panic!("no refusal of c2 counted:\n{page}"));
    assert!(!refused.ends_with(" 0"), "{refused}");
    let junk = page
        .lines()
        .find(|l| {
            l.starts_with("rudder_fleet_provider_errors_total")
                && l.contains(&format!("provider=\"kubeconfig-secrets {FLEET_NS}\""))
        })
        .unwrap_or_else(|| panic!("the garbage Secret was not counted:\n{page}"));
    assert!(!junk.ends_with(" 0"), "{junk}");
    converge(&[("c0", clients[0].clone())], "a", 14).await;
    assert!(ready(&manager).await);

    // A cluster leaves: its Secret deleted, its instance and informers stop.
    secrets
        .delete("c2", &DeleteParams::default())
        .await
        .unwrap();
    until("c2 disengaged", WITHIN, || fleet.cluster("c2").is_none()).await;
    until("c2's informers stopped", WITHIN, || {
        c2.cache().informer_count() == 0
    })
    .await;
    assert_eq!(fleet.engaged(), ["c0", "c1"]);
    converge(&members, "a", 15).await;
    // Every series of a fleet's instances names its cluster.
    for line in page.lines().filter(|l| {
        ["controller_runtime_", "workqueue_", "rudder_controller_"]
            .iter()
            .any(|prefix| l.starts_with(prefix))
    }) {
        assert!(
            line.contains("cluster=\""),
            "a fleet's instance reports without its cluster: {line}"
        );
    }

    running.0.cancel();
    running.1.await.unwrap().unwrap();
    for env in envs {
        env.stop().unwrap();
    }
}

#[tokio::test]
async fn two_replicas_share_the_clusters_without_overlap() {
    let _one = ONE_AT_A_TIME.lock().await;
    let envs = Box::pin(three_planes()).await;
    let clients: Vec<kube::Client> = envs.iter().map(|e| e.client().unwrap()).collect();
    let home = envs[0].namespace("fleet-ring").await.unwrap();
    let names = ["c0", "c1", "c2"];
    for client in &clients {
        put(client, "a", 1).await;
    }
    let log: Log = Arc::default();
    let mut replicas = Vec::new();
    for who in ["a", "b"] {
        let manager = support::manager(&home);
        let mut clusters = StaticClusters::new();
        for (name, env) in names.iter().zip(&envs) {
            clusters = clusters.with(*name, env.config().clone());
        }
        let fleet = Fleet::builder(&manager)
            .provider(clusters)
            .sharded(support::ring(&home, "fleet", who, 8))
            .cache(|cache| cache.default_namespace(WORK))
            .build()
            .unwrap();
        fleet
            .new_controller()
            .for_::<ConfigMap>()
            .complete_with({
                let log = Arc::clone(&log);
                move |tools| {
                    Requeue(Stamp {
                        tools,
                        who,
                        log: Arc::clone(&log),
                    })
                }
            })
            .unwrap();
        let running = support::start(&manager);
        replicas.push((who, manager, fleet, running));
    }

    // Every cluster is engaged on exactly one replica, once the ring settles.
    let served = |replicas: &[(&str, Arc<Manager>, Fleet, support::Running)]| {
        let mut all: Vec<String> = replicas.iter().flat_map(|r| r.2.engaged()).collect();
        all.sort();
        all
    };
    until("every cluster served once", WITHIN, || {
        served(&replicas) == ["c0", "c1", "c2"]
    })
    .await;
    for v in 2..4 {
        for (i, client) in clients.iter().enumerate() {
            converge(&[(names[i], client.clone())], "a", v).await;
        }
    }

    // The replica serving the most clusters dies without a word (its task aborted, its
    // Leases left to expire); the other takes its clusters over.
    replicas.sort_by_key(|r| std::cmp::Reverse(r.2.engaged().len()));
    let (dead, _, dead_fleet, (_, task)) = replicas.remove(0);
    let handed = dead_fleet.engaged();
    task.abort();
    let killed = Instant::now();
    let survivor = &replicas[0].2;
    until("the survivor serves every cluster", WITHIN, || {
        survivor.engaged() == ["c0", "c1", "c2"]
    })
    .await;
    eprintln!(
        "replica {dead} killed holding {handed:?}; all served by the other after {:?}",
        killed.elapsed()
    );
    for (i, client) in clients.iter().enumerate() {
        converge(&[(names[i], client.clone())], "a", 10).await;
    }

    // No cluster was reconciled by both replicas at once.
    let log = log.lock().unwrap().clone();
    for cluster in names {
        let of = |who: &str| -> Vec<(Instant, Instant)> {
            log.iter()
                .filter(|(w, c, ..)| *w == who && c == cluster)
                .map(|(.., start, end)| (*start, *end))
                .collect()
        };
        let (a, b) = (of("a"), of("b"));
        for (a_start, a_end) in &a {
            for (b_start, b_end) in &b {
                assert!(
                    a_end <= b_start || b_end <= a_start,
                    "{cluster} reconciled by both replicas at once"
                );
            }
        }
        assert!(!a.is_empty() || !b.is_empty(), "{cluster} never reconciled");
    }
    let (_, _, _, (stop, task)) = replicas.remove(0);
    stop.cancel();
    task.await.unwrap().unwrap();
    drop(envs);
}

/// [`Stamp`], asking to be run again soon, so that every cluster is reconciled all along.
struct Requeue(Stamp);

impl Reconciler for Requeue {
    type Error = kube::Error;

    async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Self::Error> {
        self.0.reconcile(request, ctx).await?;
        Ok(Action::requeue_after(Duration::from_millis(100)))
    }
}

/// Makes each ConfigMap's owned Secret `<name>-child` in the ConfigMap's cluster, with a
/// controller reference, and counts reconciles per cluster.
struct Parent {
    tools: Tools,
    counts: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl Reconciler for Parent {
    type Error = rudder::client::ClientError;

    async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Self::Error> {
        *self
            .counts
            .lock()
            .unwrap()
            .entry(ctx.cluster().unwrap().to_owned())
            .or_default() += 1;
        let Some(parent) = self.tools.get::<ConfigMap>(&request).await? else {
            return Ok(Action::done());
        };
        let name = format!("{}-child", request.name());
        let child = Request::namespaced(WORK, &name);
        if self.tools.get::<Secret>(&child).await?.is_none() {
            let mut secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(WORK.into()),
                    ..ObjectMeta::default()
                },
                ..Secret::default()
            };
            rudder::client::set_controller_reference(&*parent, &mut secret)?;
            match self.tools.client().create(&secret).await {
                Err(e) if e.status_code() == Some(409) => {}
                other => {
                    other?;
                }
            }
        }
        Ok(Action::done())
    }
}

#[tokio::test]
async fn owned_objects_map_to_their_owner_in_their_own_cluster_and_a_subset_is_served() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (a, b) = tokio::join!(TestEnv::start(), TestEnv::start());
    let envs = [a.unwrap(), b.unwrap()];
    let clients: Vec<kube::Client> = envs.iter().map(|e| e.client().unwrap()).collect();
    for client in &clients {
        create_namespace(client, WORK).await;
        put(client, "p", 1).await;
    }
    let manager = Arc::new(
        Manager::builder(clients[0].clone())
            .health_probe_address(None)
            .metrics_address(None)
            .build()
            .unwrap(),
    );
    let fleet = Fleet::builder(&manager)
        .provider(
            StaticClusters::new()
                .with("m0", envs[0].config().clone())
                .with("m1", envs[1].config().clone()),
        )
        .cache(|cache| cache.default_namespace(WORK))
        .build()
        .unwrap();
    let counts: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    // Served only in m1.
    fleet
        .new_controller()
        .for_::<ConfigMap>()
        .owns::<Secret>()
        .named("parent")
        .clusters(|name| name == "m1")
        .complete_with({
            let counts = Arc::clone(&counts);
            move |tools| Parent {
                tools,
                counts: Arc::clone(&counts),
            }
        })
        .unwrap();
    let running = support::start(&manager);
    let secrets: Api<Secret> = Api::namespaced(clients[1].clone(), WORK);
    let first = eventually("the child made in m1", WITHIN, async || {
        secrets.get_opt("p-child").await.unwrap()
    })
    .await;
    // Deleting the owned Secret queues its owner in the same cluster, which makes it again.
    secrets
        .delete("p-child", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the child made again in m1", WITHIN, async || {
        secrets
            .get_opt("p-child")
            .await
            .unwrap()
            .filter(|s| s.metadata.uid != first.metadata.uid)
    })
    .await;
    // m0 is engaged but not served by this controller: no child there, no reconcile of m0.
    assert_eq!(fleet.engaged(), ["m0", "m1"]);
    let in_m0: Api<Secret> = Api::namespaced(clients[0].clone(), WORK);
    assert!(in_m0.get_opt("p-child").await.unwrap().is_none());
    assert_eq!(counts.lock().unwrap().get("m0"), None);
    running.0.cancel();
    running.1.await.unwrap().unwrap();
}

/// The label [`a_fleet_controllers_event_filter_and_source_act_in_each_member`]'s event
/// filter lets through.
const WATCHED: &str = "fleet.rudder.dev/watched";

/// Whether `event`'s object carries [`WATCHED`].
fn watched(event: rudder::MetaEvent<'_>) -> bool {
    event
        .meta()
        .labels
        .as_ref()
        .is_some_and(|labels| labels.contains_key(WATCHED))
}

/// Logs (cluster, name) of every request reconciled.
struct Seen(Arc<Mutex<Vec<(String, String)>>>);

impl Reconciler for Seen {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Self::Error> {
        self.0.lock().unwrap().push((
            ctx.cluster().unwrap_or_default().to_owned(),
            request.name().to_owned(),
        ));
        Ok(Action::done())
    }
}

async fn put_labelled<K>(client: &kube::Client, name: &str, labelled: bool)
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), WORK);
    let labels = if labelled {
        serde_json::json!({WATCHED: "yes"})
    } else {
        serde_json::json!({})
    };
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()), "kind": K::kind(&()),
        "metadata": {"name": name, "labels": labels},
    });
    api.patch(
        name,
        &PatchParams::apply("fleet-test").force(),
        &Patch::Apply(&patch),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_fleet_controllers_event_filter_and_source_act_in_each_member() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (a, b) = tokio::join!(TestEnv::start(), TestEnv::start());
    let envs = [a.unwrap(), b.unwrap()];
    let clients: Vec<kube::Client> = envs.iter().map(|e| e.client().unwrap()).collect();
    for client in &clients {
        create_namespace(client, WORK).await;
    }
    let manager = Arc::new(
        Manager::builder(clients[0].clone())
            .health_probe_address(None)
            .metrics_address(None)
            .build()
            .unwrap(),
    );
    let fleet = Fleet::builder(&manager)
        .provider(
            StaticClusters::new()
                .with("m0", envs[0].config().clone())
                .with("m1", envs[1].config().clone()),
        )
        .cache(|cache| cache.default_namespace(WORK))
        .build()
        .unwrap();
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    // Made per member: the Secrets of the member the instance serves.
    let sources: Arc<Mutex<Vec<String>>> = Arc::default();
    fleet
        .new_controller()
        .for_::<ConfigMap>()
        .event_filter(watched)
        .watches(
            {
                let sources = Arc::clone(&sources);
                move |cluster: &rudder::multicluster::Cluster| {
                    sources.lock().unwrap().push(cluster.name().to_owned());
                    Kind::<Secret>::from_cache(cluster.cache())
                }
            },
            rudder::handler::EnqueueMapped(|secret: &Secret| {
                vec![Request::namespaced(
                    WORK,
                    &format!(
                        "from-{}",
                        secret.metadata.name.as_deref().unwrap_or_default()
                    ),
                )]
            }),
        )
        .permissions(rudder::manager::rbac::Permissions::new().informer::<Secret>())
        .named("filtered")
        .with_options(ControllerOptions::new().workers(1))
        .complete_with({
            let seen = Arc::clone(&seen);
            move |_| Seen(Arc::clone(&seen))
        })
        .unwrap();
    let running = support::start(&manager);
    let reconciled = |cluster: &str, name: &str| {
        seen.lock()
            .unwrap()
            .iter()
            .any(|(c, n)| c == cluster && n == name)
    };
    // Unlabelled first: had the filter let it through, it would be queued before the
    // labelled one, and reconciled first by the one worker.
    for client in &clients {
        put_labelled::<ConfigMap>(client, "out", false).await;
        put_labelled::<ConfigMap>(client, "in", true).await;
    }
    for cluster in ["m0", "m1"] {
        eventually(
            &format!("`in` reconciled in {cluster}"),
            WITHIN,
            async || reconciled(cluster, "in").then_some(()),
        )
        .await;
        assert!(
            !reconciled(cluster, "out"),
            "the event filter let `out` through in {cluster}"
        );
    }
    // The Secret source of m1's instance sees m1's Secrets only, through the same filter.
    put_labelled::<Secret>(&clients[1], "s-out", false).await;
    put_labelled::<Secret>(&clients[1], "s-in", true).await;
    eventually("the Secret mapped in m1", WITHIN, async || {
        reconciled("m1", "from-s-in").then_some(())
    })
    .await;
    assert!(
        !reconciled("m1", "from-s-out"),
        "the event filter let `s-out` through"
    );
    assert!(
        !reconciled("m0", "from-s-in"),
        "m0's source saw m1's Secret"
    );
    let mut made = sources.lock().unwrap().clone();
    made.sort();
    assert_eq!(made, ["m0", "m1"], "one source made for each member");
    running.0.cancel();
    running.1.await.unwrap().unwrap();
}

/// The member frozen by [`a_member_that_stops_answering_is_unhealthy_until_it_answers_again`]
/// (metrics and the log are the process's: the name keeps its series and lines apart).
const FROZEN: &str = "frozen-member";

/// Sends `signal` (`STOP`, `CONT`) to `env`'s API server.
fn signal_apiserver(env: &TestEnv, signal: &str) {
    let (_, pid) = env
        .pids()
        .into_iter()
        .find(|(name, _)| *name == "kube-apiserver")
        .expect("the control plane runs an API server");
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// The value of `name{cluster="<cluster>", ..labels}` on the page at `metrics`, if scraped.
async fn cluster_sample(
    metrics: std::net::SocketAddr,
    name: &str,
    cluster: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    let page = rudder_envtest::least_privilege::scrape(metrics)
        .await
        .ok()?;
    rudder_envtest::metrics::samples(&page, name)
        .into_iter()
        .find(|(have, _)| {
            rudder_envtest::metrics::has_label(have, "cluster", cluster)
                && labels
                    .iter()
                    .all(|(label, value)| rudder_envtest::metrics::has_label(have, label, value))
        })
        .map(|(_, value)| value)
}

/// The lines logged about [`FROZEN`] that contain `message`.
fn logged_about_frozen(log: &rudder_envtest::least_privilege::LogCapture, message: &str) -> usize {
    log.lines_containing(message)
        .iter()
        .filter(|line| line.contains(&format!("cluster={FROZEN}")))
        .count()
}

#[tokio::test]
async fn a_member_that_stops_answering_is_unhealthy_until_it_answers_again() {
    let _one = ONE_AT_A_TIME.lock().await;
    let log = rudder_envtest::least_privilege::LogCapture::global();
    let (home, member) = tokio::join!(TestEnv::start(), TestEnv::start());
    let (home, member) = (home.unwrap(), member.unwrap());
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let manager = Arc::new(
        Manager::builder(home.client().unwrap())
            .health_probe_address(None)
            .metrics_address(Some(loopback))
            .build()
            .unwrap(),
    );
    let fleet = Fleet::builder(&manager)
        .provider(StaticClusters::new().with(FROZEN, member.config().clone()))
        .probe_every(Duration::from_millis(200))
        .probe_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let running = support::start(&manager);
    let metrics = eventually("the metrics server", WITHIN, async || {
        manager.metrics_address()
    })
    .await;
    let healthy =
        async || cluster_sample(metrics, "rudder_fleet_cluster_healthy", FROZEN, &[]).await;
    eventually("the member answering", WITHIN, async || {
        (healthy().await == Some(1.0)).then_some(())
    })
    .await;
    let unanswered = async || {
        cluster_sample(
            metrics,
            "rudder_fleet_cluster_request_failures_total",
            FROZEN,
            &[("reason", "unreachable")],
        )
        .await
        .unwrap_or(0.0)
    };
    let before = unanswered().await;

    // Frozen: it accepts connections and answers nothing. Each probe times out, and that
    // is a failure like any other.
    signal_apiserver(&member, "STOP");
    eventually("the frozen member unhealthy", WITHIN, async || {
        (healthy().await == Some(0.0)).then_some(())
    })
    .await;
    assert_eq!(
        fleet.cluster(FROZEN).unwrap().health(),
        ClusterHealth::Unreachable
    );
    // Three more probes unanswered, counted: still one warn line for the streak.
    eventually("unanswered probes counted", WITHIN, async || {
        (unanswered().await >= before + 3.0).then_some(())
    })
    .await;
    const FAILING: &str = "API server is failing";
    assert_eq!(
        logged_about_frozen(log, FAILING),
        1,
        "one warn line per streak:\n{}",
        log.lines().join("\n")
    );

    // Thawed: it answers again, and says so once.
    signal_apiserver(&member, "CONT");
    eventually("the member answering again", WITHIN, async || {
        (healthy().await == Some(1.0)).then_some(())
    })
    .await;
    assert_eq!(
        fleet.cluster(FROZEN).unwrap().health(),
        ClusterHealth::Healthy
    );
    assert_eq!(logged_about_frozen(log, "answers again"), 1);
    assert_eq!(logged_about_frozen(log, FAILING), 1);

    running.0.cancel();
    running.1.await.unwrap().unwrap();
    member.stop().unwrap();
    home.stop().unwrap();
}

/// Announces its clusters, then waits for its stop, holding `alive` all along.
struct Members {
    clusters: Vec<(String, kube::Config)>,
    alive: Arc<()>,
}

impl rudder::multicluster::Provider for Members {
    fn name(&self) -> String {
        "members".into()
    }

    fn run(
        &self,
        announcer: rudder::multicluster::Announcer,
        shutdown: rudder::Shutdown,
    ) -> futures::future::BoxFuture<'static, Result<(), rudder::BoxError>> {
        let alive = Arc::clone(&self.alive);
        let clusters = self.clusters.clone();
        Box::pin(async move {
            let _alive = alive;
            for (name, config) in clusters {
                announcer.engage(name, config);
            }
            shutdown.stopped().await;
            Ok(())
        })
    }
}

/// Notes the clusters it reconciled in and holds `alive` while it runs; `stubborn`, it never
/// returns and ignores its context's cancellation.
struct Holds {
    alive: Arc<()>,
    started: Arc<Mutex<std::collections::BTreeSet<String>>>,
    stubborn: bool,
}

impl Reconciler for Holds {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, _: Request, ctx: Context) -> Result<Action, Self::Error> {
        let _alive = Arc::clone(&self.alive);
        self.started
            .lock()
            .unwrap()
            .insert(ctx.cluster().unwrap().to_owned());
        if self.stubborn {
            std::future::pending::<()>().await;
        }
        Ok(Action::done())
    }
}

#[tokio::test]
async fn a_stopped_fleet_leaves_no_task_running() {
    let _one = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::start().await.unwrap();
    let client = env.client().unwrap();
    create_namespace(&client, WORK).await;
    put(&client, "held", 1).await;
    for stubborn in [false, true] {
        let manager = Arc::new(
            Manager::builder(client.clone())
                .health_probe_address(None)
                .metrics_address(None)
                .graceful_shutdown(rudder::manager::GracefulShutdown::After(
                    Duration::from_secs(2),
                ))
                .build()
                .unwrap(),
        );
        // One control plane announced as two members: each has its own client, cache,
        // probe and controller.
        let names = ["m0", "m1"];
        let alive = Arc::new(());
        let fleet = Fleet::builder(&manager)
            .provider(Members {
                clusters: names
                    .iter()
                    .map(|name| ((*name).to_owned(), env.config().clone()))
                    .collect(),
                alive: Arc::clone(&alive),
            })
            .cache(|cache| cache.default_namespace(WORK))
            .probe_every(Duration::from_millis(200))
            .build()
            .unwrap();
        let started: Arc<Mutex<std::collections::BTreeSet<String>>> = Arc::default();
        fleet
            .new_controller()
            .for_::<ConfigMap>()
            .named("holds")
            .complete_with({
                // The fleet keeps the factory: it holds `alive` weakly, its reconcilers
                // strongly.
                let (alive, started) = (Arc::downgrade(&alive), Arc::clone(&started));
                move |_| Holds {
                    alive: alive.upgrade().unwrap(),
                    started: Arc::clone(&started),
                    stubborn,
                }
            })
            .unwrap();
        let running = support::start(&manager);
        until("both members reconciled", WITHIN, || {
            started.lock().unwrap().len() == names.len()
        })
        .await;
        // Each member's cache lives as long as anything of its cluster runs: its probe, its
        // controller, its disengagement.
        let caches: Vec<std::sync::Weak<_>> = names
            .iter()
            .map(|name| Arc::downgrade(fleet.cluster(name).unwrap().cache().writes()))
            .collect();

        running.0.cancel();
        running.1.await.unwrap().unwrap();
        assert!(fleet.engaged().is_empty());
        assert_eq!(
            Arc::strong_count(&alive),
            1,
            "a provider, controller or reconcile of the fleet outlived the manager's stop (stubborn: {stubborn})"
        );
        for (name, cache) in names.iter().zip(&caches) {
            assert!(
                cache.upgrade().is_none(),
                "a task of {name} outlived the manager's stop (stubborn: {stubborn})"
            );
        }
    }
    env.stop().unwrap();
}
