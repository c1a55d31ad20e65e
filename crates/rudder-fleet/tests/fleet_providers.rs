//! The Cluster API and ClusterProfile providers against a real home cluster with the real
//! CRDs (from the Go modules Cluster API and the Cluster Inventory API publish, at pinned
//! versions) and a real member: a member is engaged while its object is ready and its
//! kubeconfig Secret exists, its controller reconciles in it, and it is disengaged when the
//! object stops being ready, its Secret goes, or the object goes. Bad credentials (a garbage
//! kubeconfig, two Secrets for one profile) are counted and change nothing. The Cluster API
//! provider watches every namespace, the ClusterProfile provider one. No Cluster API
//! controller or cluster manager runs: the tests write the status themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The facade's test helpers, one module for both crates' tests.
#[path = "../../rudder/tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ObjectMeta, Patch,
    PatchParams, PostParams,
};
use rudder::multicluster::{ClusterApiClusters, ClusterProfiles, Fleet};
use rudder::prelude::*;
use rudder_envtest::TestEnv;
use rudder_envtest::poll::{eventually, until};

/// Cluster API at the release whose CRDs are installed (core/config/crd/bases from 1.14 on).
const CLUSTER_API: (&str, &str) = ("sigs.k8s.io/cluster-api", "v1.14.2");
/// The Cluster Inventory API at the release whose CRDs are installed.
const CLUSTER_INVENTORY_API: (&str, &str) = ("sigs.k8s.io/cluster-inventory-api", "v0.1.3");

/// Where the members' objects and Secrets live on the home cluster.
const FLEET_NS: &str = "fleet";
/// Where each member's ConfigMaps live.
const WORK: &str = "work";
const CLUSTER_ANNOTATION: &str = "fleet.rudder.dev/cluster";
const SEEN_ANNOTATION: &str = "fleet.rudder.dev/seen";
/// The consumer the ClusterProfile Secrets are made for.
const CONSUMER: &str = "rudder-test";
const WITHIN: Duration = Duration::from_secs(60);

/// Each test starts two control planes; one test at a time is enough for two cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Stamps each ConfigMap with the cluster that reconciled it and its `v`.
struct Stamp(Tools);

impl Reconciler for Stamp {
    type Error = kube::Error;

    async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Self::Error> {
        let cluster = ctx
            .cluster()
            .expect("a fleet's reconcile names its cluster");
        if let Some(cm) = self.0.get::<ConfigMap>(&request).await.unwrap() {
            let v = cm
                .data
                .as_ref()
                .and_then(|d| d.get("v").cloned())
                .unwrap_or_default();
            let patch = serde_json::json!({"metadata": {"annotations": {
                CLUSTER_ANNOTATION: cluster,
                SEEN_ANNOTATION: v,
            }}});
            Api::<ConfigMap>::namespaced(self.0.kube().clone(), WORK)
                .patch(
                    request.name(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
        }
        Ok(Action::done())
    }
}

/// The two kinds of object that announce members, and how the tests write them.
#[derive(Clone, Copy)]
enum Kind {
    ClusterApi,
    ClusterProfile,
}

impl Kind {
    fn resource(self) -> ApiResource {
        match self {
            Kind::ClusterApi => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
                "clusters",
            ),
            Kind::ClusterProfile => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ClusterProfile"),
                "clusterprofiles",
            ),
        }
    }

    /// The kind's CRD, as its Go module publishes it.
    fn crds(self) -> Vec<CustomResourceDefinition> {
        match self {
            Kind::ClusterApi => support::go_module::crds(
                CLUSTER_API.0,
                CLUSTER_API.1,
                "core/config/crd/bases/cluster.x-k8s.io_clusters.yaml",
            ),
            Kind::ClusterProfile => support::go_module::crds(
                CLUSTER_INVENTORY_API.0,
                CLUSTER_INVENTORY_API.1,
                "config/crd/bases/multicluster.x-k8s.io_clusterprofiles.yaml",
            ),
        }
    }

    fn api(self, home: &kube::Client) -> Api<DynamicObject> {
        Api::namespaced_with(home.clone(), FLEET_NS, &self.resource())
    }

    /// Creates the object `name`, not ready.
    async fn create(self, home: &kube::Client, name: &str) {
        let resource = self.resource();
        let spec = match self {
            Kind::ClusterApi => serde_json::json!({
                "controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443},
            }),
            Kind::ClusterProfile => serde_json::json!({
                "displayName": name, "clusterManager": {"name": "rudder-test"},
            }),
        };
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": resource.api_version, "kind": resource.kind,
            "metadata": {"name": name, "namespace": FLEET_NS},
            "spec": spec,
        }))
        .unwrap();
        self.api(home)
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }

    /// Writes the status that makes `name` ready or not, as Cluster API's controller or a
    /// cluster manager would.
    async fn set_ready(self, home: &kube::Client, name: &str, ready: bool) {
        let status = match self {
            Kind::ClusterApi => serde_json::json!({
                "phase": if ready { "Provisioned" } else { "Provisioning" },
                "initialization": {"controlPlaneInitialized": true},
            }),
            Kind::ClusterProfile => serde_json::json!({"conditions": [{
                "type": "ControlPlaneHealthy",
                "status": if ready { "True" } else { "False" },
                "reason": if ready { "Healthy" } else { "Unreachable" },
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]}),
        };
        self.api(home)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": status})),
            )
            .await
            .unwrap();
    }

    /// A kubeconfig Secret `secret` for the member `name`, as Cluster API or a cluster manager
    /// makes it.
    fn secret(self, name: &str, secret: &str, kubeconfig: &str) -> Secret {
        let (labels, key) = match self {
            Kind::ClusterApi => (
                [("cluster.x-k8s.io/cluster-name".to_owned(), name.to_owned())].into(),
                "value",
            ),
            Kind::ClusterProfile => (
                [
                    (
                        "x-k8s.io/cluster-inventory-consumer".to_owned(),
                        CONSUMER.to_owned(),
                    ),
                    ("x-k8s.io/cluster-profile".to_owned(), name.to_owned()),
                ]
                .into(),
                "Config",
            ),
        };
        Secret {
            metadata: ObjectMeta {
                name: Some(secret.to_owned()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            data: Some(
                [(
                    key.to_owned(),
                    k8s_openapi::ByteString(kubeconfig.as_bytes().to_vec()),
                )]
                .into(),
            ),
            ..Secret::default()
        }
    }

    /// The name of the kubeconfig Secret of the member `name`: Cluster API's is fixed, a
    /// cluster manager's is its own choice.
    fn secret_name(self, name: &str) -> String {
        match self {
            Kind::ClusterApi => format!("{name}-kubeconfig"),
            Kind::ClusterProfile => format!("{name}-access-{CONSUMER}"),
        }
    }

    /// The provider's name, as its metrics label it. The Cluster API provider watches every
    /// namespace, the ClusterProfile provider one, so that both scopes are tested.
    fn provider(self) -> String {
        match self {
            Kind::ClusterApi => "cluster-api all namespaces".to_owned(),
            Kind::ClusterProfile => format!("cluster-profiles {FLEET_NS}"),
        }
    }
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Creates or updates the ConfigMap `a` in `work` with `v`.
async fn put(client: &kube::Client, v: u32) {
    let patch = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a"},
        "data": {"v": v.to_string()},
    });
    Api::<ConfigMap>::namespaced(client.clone(), WORK)
        .patch(
            "a",
            &PatchParams::apply("fleet-providers-test").force(),
            &Patch::Apply(&patch),
        )
        .await
        .unwrap();
}

/// Writes `v` into the member's ConfigMap and waits until the instance for `cluster` stamped
/// it: the member is engaged and its controller runs.
async fn served(member: &kube::Client, cluster: &str, v: u32) {
    put(member, v).await;
    let api: Api<ConfigMap> = Api::namespaced(member.clone(), WORK);
    eventually(&format!("v={v} stamped by {cluster}"), WITHIN, async || {
        let cm = api.get("a").await.ok()?;
        let annotations = cm.metadata.annotations.unwrap_or_default();
        (annotations.get(CLUSTER_ANNOTATION).map(String::as_str) == Some(cluster)
            && annotations.get(SEEN_ANNOTATION) == Some(&v.to_string()))
        .then_some(())
    })
    .await;
}

/// The value of `rudder_fleet_provider_errors_total` for `provider`.
async fn provider_errors(manager: &Manager, provider: &str) -> u64 {
    let page = rudder_envtest::least_privilege::scrape(manager.metrics_address().unwrap())
        .await
        .unwrap();
    page.lines()
        .find(|l| {
            l.starts_with("rudder_fleet_provider_errors_total")
                && l.contains(&format!("provider=\"{provider}\""))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// The whole life of a member announced by `kind`, on a home cluster and a member of their own.
async fn a_member_follows_its_object_and_secret(kind: Kind) {
    let _one = ONE_AT_A_TIME.lock().await;
    // Before any control plane starts: without Go, the test fails at once, saying so.
    let crds = kind.crds();
    let (home_env, member_env) = tokio::join!(TestEnv::start(), TestEnv::start());
    let (home_env, member_env) = (home_env.unwrap(), member_env.unwrap());
    home_env.install_crds(crds).await.unwrap();
    let home = home_env.client().unwrap();
    let member = member_env.client().unwrap();
    create_namespace(&home, FLEET_NS).await;
    create_namespace(&member, WORK).await;
    let kubeconfig = std::fs::read_to_string(member_env.kubeconfig_path()).unwrap();
    let secrets: Api<Secret> = Api::namespaced(home.clone(), FLEET_NS);

    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let manager = Arc::new(
        Manager::builder(home.clone())
            .health_probe_address(None)
            .metrics_address(Some(loopback))
            .build()
            .unwrap(),
    );
    let fleet = Fleet::builder(&manager);
    let fleet = match kind {
        Kind::ClusterApi => fleet.cluster_api(ClusterApiClusters::all_namespaces()),
        Kind::ClusterProfile => fleet.cluster_profiles(ClusterProfiles::new(FLEET_NS, CONSUMER)),
    }
    .cache(|cache| cache.default_namespace(WORK))
    .build()
    .unwrap();
    fleet
        .new_controller()
        .for_::<ConfigMap>()
        .named("stamp")
        .complete_with(Stamp)
        .unwrap();
    // The provider's permissions are the manager's.
    let group = kind.resource().group;
    let plural = kind.resource().plural;
    let scope = match kind {
        Kind::ClusterApi => rudder::manager::rbac::RuleScope::Cluster,
        Kind::ClusterProfile => rudder::manager::rbac::RuleScope::Namespace(FLEET_NS.to_owned()),
    };
    let rules = manager.permissions();
    assert!(rules.allows(&scope, &group, &plural, rudder::manager::rbac::Verb::Watch));
    assert!(rules.allows(&scope, "", "secrets", rudder::manager::rbac::Verb::Watch));
    let running = support::start(&manager);

    // Its Secret and a not-yet-ready object: nothing is engaged. Then the object turns
    // ready, and the member is served under `<namespace>/<name>`.
    let east = format!("{FLEET_NS}/east");
    secrets
        .create(
            &PostParams::default(),
            &kind.secret("east", &kind.secret_name("east"), &kubeconfig),
        )
        .await
        .unwrap();
    kind.create(&home, "east").await;
    assert!(fleet.engaged().is_empty());
    kind.set_ready(&home, "east", true).await;
    served(&member, &east, 1).await;
    assert_eq!(fleet.engaged(), [east.as_str()]);

    // No longer ready: disengaged. Ready again: engaged again.
    kind.set_ready(&home, "east", false).await;
    until("east disengaged once not ready", WITHIN, || {
        fleet.cluster(&east).is_none()
    })
    .await;
    kind.set_ready(&home, "east", true).await;
    served(&member, &east, 2).await;

    // A ready member whose kubeconfig is garbage: counted, not engaged, and east untouched.
    let errors_before = provider_errors(&manager, &kind.provider()).await;
    kind.create(&home, "west").await;
    kind.set_ready(&home, "west", true).await;
    secrets
        .create(
            &PostParams::default(),
            &kind.secret("west", &kind.secret_name("west"), "clusters: [[["),
        )
        .await
        .unwrap();
    eventually("the garbage kubeconfig counted", WITHIN, async || {
        (provider_errors(&manager, &kind.provider()).await > errors_before).then_some(())
    })
    .await;
    assert_eq!(fleet.engaged(), [east.as_str()]);
    served(&member, &east, 3).await;

    // Its Secret deleted: disengaged. Created again: engaged again.
    secrets
        .delete(&kind.secret_name("east"), &DeleteParams::default())
        .await
        .unwrap();
    until("east disengaged once its Secret went", WITHIN, || {
        fleet.cluster(&east).is_none()
    })
    .await;
    secrets
        .create(
            &PostParams::default(),
            &kind.secret("east", &kind.secret_name("east"), &kubeconfig),
        )
        .await
        .unwrap();
    served(&member, &east, 4).await;
    if let Kind::ClusterProfile = kind {
        // A second Secret for the same profile is ambiguous: counted, and east is left as
        // it was.
        let errors_before = provider_errors(&manager, &kind.provider()).await;
        secrets
            .create(
                &PostParams::default(),
                &kind.secret("east", "east-access-again", &kubeconfig),
            )
            .await
            .unwrap();
        eventually("the second Secret counted", WITHIN, async || {
            (provider_errors(&manager, &kind.provider()).await > errors_before).then_some(())
        })
        .await;
        served(&member, &east, 5).await;
    }
    let engaged = fleet.cluster(&east).unwrap();

    // The object deleted: disengaged, its informers stopped.
    kind.api(&home)
        .delete("east", &DeleteParams::default())
        .await
        .unwrap();
    until("east disengaged once its object went", WITHIN, || {
        fleet.cluster(&east).is_none()
    })
    .await;
    until("east's informers stopped", WITHIN, || {
        engaged.cache().informer_count() == 0
    })
    .await;
    assert!(fleet.engaged().is_empty());

    running.0.cancel();
    running.1.await.unwrap().unwrap();
    home_env.stop().unwrap();
    member_env.stop().unwrap();
}

#[tokio::test]
async fn a_cluster_api_cluster_is_a_member_while_provisioned_with_its_kubeconfig() {
    Box::pin(a_member_follows_its_object_and_secret(Kind::ClusterApi)).await;
}

#[tokio::test]
async fn a_cluster_profile_is_a_member_while_healthy_with_its_credentials() {
    Box::pin(a_member_follows_its_object_and_secret(Kind::ClusterProfile)).await;
}
