//! RBAC recorded by the builder, rendered without a cluster (a render-only manager on an
//! offline client): what each declaration adds, where, and nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::core::PartialObjectMeta;
use rudder::handler::EnqueueObject;
use rudder::manager::leader_election::LeaderElectionConfig;
use rudder::manifests::{DeployOptions, manifests, offline_client};
use rudder::prelude::*;
use rudder::rbac::{Permissions, RuleScope, Verb};

struct Noop;

impl Reconciler for Noop {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        Ok(Action::done())
    }
}

fn manager(namespace: Option<&str>) -> Manager {
    let mut builder = Manager::builder(offline_client().unwrap())
        .health_probe_address(None)
        .metrics_address(None)
        .render_only(true)
        .leader_election(LeaderElectionConfig::new("ops", "lease"));
    if let Some(ns) = namespace {
        let ns = ns.to_owned();
        builder = builder.cache(move |c| c.default_namespace(ns));
    }
    builder.build().unwrap()
}

#[tokio::test]
async fn each_declaration_records_its_permissions_where_the_cache_watches() {
    let manager = manager(Some("apps"));
    rudder::new_controller(&manager)
        .for_::<ConfigMap>()
        .owns::<Pod>()
        .watches_kind::<Namespace, _>(EnqueueObject)
        // A metadata-only watch needs the same reads as a full one.
        .watches_kind::<PartialObjectMeta<Secret>, _>(EnqueueObject)
        .permissions(Permissions::new().status::<ConfigMap>())
        .complete_with(|_| Noop)
        .await
        .unwrap();
    let rules = manager.permissions();
    let apps = RuleScope::Namespace("apps".into());
    for verb in Verb::READ {
        assert!(rules.allows(&apps, "", "configmaps", verb));
        assert!(rules.allows(&apps, "", "pods", verb));
        // Namespaces are cluster-scoped: read cluster-wide.
        assert!(rules.allows(&RuleScope::Cluster, "", "namespaces", verb));
        assert!(rules.allows(&apps, "", "secrets", verb));
    }
    for verb in Verb::WRITE {
        assert!(rules.allows(&apps, "", "pods", verb), "{verb}");
        assert!(!rules.allows(&apps, "", "configmaps", verb), "{verb}");
    }
    assert!(rules.allows(&apps, "", "configmaps/finalizers", Verb::Update));
    assert!(rules.allows(&apps, "", "configmaps/status", Verb::Patch));
    assert!(rules.allows(&apps, "events.k8s.io", "events", Verb::Create));
    // Nothing outside the watched namespace but the cluster-scoped type and the Lease.
    assert!(!rules.allows(&RuleScope::Cluster, "", "pods", Verb::Get));
    let ops = RuleScope::Namespace("ops".into());
    assert!(rules.allows(&ops, "coordination.k8s.io", "leases", Verb::Update));
    assert!(!rules.allows(&ops, "", "secrets", Verb::Get));

    let rendered = manifests(
        &manager,
        &DeployOptions::new("op", "ops", "example/op:1").create_namespace(false),
    )
    .unwrap();
    let namespaces: Vec<String> = rendered
        .rbac
        .roles
        .iter()
        .map(|r| r.metadata.namespace.clone().unwrap())
        .collect();
    assert_eq!(namespaces, ["apps", "ops"]);
    let cluster = rendered.rbac.cluster_role.clone().unwrap().rules.unwrap();
    assert_eq!(cluster.len(), 1, "{cluster:?}");
    let yaml = rendered.to_yaml().unwrap();
    assert!(!yaml.contains('*'), "{yaml}");
}

#[tokio::test]
async fn complete_without_tools_records_no_events_and_a_failed_build_records_nothing() {
    let manager = manager(None);
    rudder::new_controller(&manager)
        .for_::<Secret>()
        .complete(Noop)
        .await
        .unwrap();
    let rules = manager.permissions();
    assert!(rules.allows(&RuleScope::Cluster, "", "secrets", Verb::Watch));
    assert!(!rules.allows(&RuleScope::Cluster, "events.k8s.io", "events", Verb::Create));
    // The same name again fails at complete: its permissions are not recorded.
    let err = rudder::new_controller(&manager)
        .for_::<Pod>()
        .named("secret")
        .complete(Noop)
        .await;
    assert!(err.is_err());
    assert!(
        !manager
            .permissions()
            .allows(&RuleScope::Cluster, "", "pods", Verb::Get)
    );
}
