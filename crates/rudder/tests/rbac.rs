//! RBAC recorded by the builder, rendered without a cluster (a render-only manager on an
//! offline client): what each declaration adds, where, and nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::core::PartialObjectMeta;
use rudder::handler::EnqueueObject;
use rudder::lease::leader_election::LeaderElectionConfig;
use rudder::manager::rbac::{Permissions, RuleScope, Verb};
use rudder::manifests::{DeployOptions, manifests, offline_client};
use rudder::prelude::*;

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
    // Every watched type: what its informer needs, list and watch; no get.
    for verb in Verb::INFORMER {
        assert!(rules.allows(&apps, "", "configmaps", verb));
        assert!(rules.allows(&apps, "", "pods", verb));
        // Namespaces are cluster-scoped: read cluster-wide.
        assert!(rules.allows(&RuleScope::Cluster, "", "namespaces", verb));
        assert!(rules.allows(&apps, "", "secrets", verb));
    }
    for resource in ["configmaps", "secrets"] {
        assert!(!rules.allows(&apps, "", resource, Verb::Get), "{resource}");
    }
    assert!(!rules.allows(&RuleScope::Cluster, "", "namespaces", Verb::Get));
    // An owned type: what create_or_patch sends, get, create and patch; not update nor
    // delete, which the reconciler declares when it uses them.
    for verb in Verb::CREATE_OR_PATCH {
        assert!(rules.allows(&apps, "", "pods", verb), "{verb}");
    }
    for verb in [Verb::Update, Verb::Delete, Verb::DeleteCollection] {
        assert!(!rules.allows(&apps, "", "pods", verb), "{verb}");
    }
    for verb in Verb::WRITE {
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

#[tokio::test]
async fn owns_writes_records_exactly_its_verbs_and_reads_records_the_informers() {
    let manager = manager(Some("apps"));
    rudder::new_controller(&manager)
        .for_::<ConfigMap>()
        .owns_writes::<Pod>([Verb::Create, Verb::Delete])
        .reads::<Secret>()
        .named("creates-and-deletes")
        .complete(Noop)
        .await
        .unwrap();
    let rules = manager.permissions();
    let apps = RuleScope::Namespace("apps".into());
    for verb in [Verb::List, Verb::Watch, Verb::Create, Verb::Delete] {
        assert!(rules.allows(&apps, "", "pods", verb), "{verb}");
    }
    for verb in [Verb::Get, Verb::Patch, Verb::Update] {
        assert!(!rules.allows(&apps, "", "pods", verb), "{verb}");
    }
    // A create sets the owner reference: the primary's finalizers, for blockOwnerDeletion.
    assert!(rules.allows(&apps, "", "configmaps/finalizers", Verb::Update));
    for verb in Verb::INFORMER {
        assert!(rules.allows(&apps, "", "secrets", verb));
    }
    assert!(!rules.allows(&apps, "", "secrets", Verb::Get));

    // Owned objects only deleted (made by someone else): no owner reference is written, so
    // nothing on the primary's finalizers.
    let manager = self::manager(Some("apps"));
    rudder::new_controller(&manager)
        .for_::<ConfigMap>()
        .owns_writes::<Pod>([Verb::Delete])
        .named("only-deletes")
        .complete(Noop)
        .await
        .unwrap();
    let rules = manager.permissions();
    assert!(rules.allows(&apps, "", "pods", Verb::Delete));
    assert!(!rules.allows(&apps, "", "configmaps/finalizers", Verb::Update));
}

#[tokio::test]
async fn a_read_is_declared_where_the_cache_reads_it_and_named_when_it_is_not() {
    let manager = Manager::builder(offline_client().unwrap())
        .health_probe_address(None)
        .metrics_address(None)
        .cache(|c| c.default_namespace("apps"))
        .leader_election(LeaderElectionConfig::new("apps", "lease"))
        .build()
        .unwrap();
    rudder::new_controller(&manager)
        .for_::<ConfigMap>()
        .reads::<Namespace>()
        .permissions(Permissions::new().informer::<PartialObjectMeta<Pod>>())
        .named("reads")
        .complete(Noop)
        .await
        .unwrap_err(); // Not served: the offline client reaches no API server.
    // A failed complete records nothing; record what a working one would have.
    manager.record_permissions(
        &Permissions::new()
            .informer::<ConfigMap>()
            .informer::<Namespace>()
            .informer::<Pod>(),
    );
    let declared = manager.declared_reads().unwrap();
    declared.check::<ConfigMap>(Some("apps")).unwrap();
    declared.check::<ConfigMap>(None).unwrap();
    declared.check::<Namespace>(None).unwrap();
    declared
        .check::<PartialObjectMeta<Pod>>(Some("apps"))
        .unwrap();
    let undeclared = declared.check::<Secret>(Some("apps")).unwrap_err();
    assert_eq!(undeclared.kind, "Secret");
    assert_eq!(undeclared.missing, Verb::INFORMER);
    let message = undeclared.to_string();
    assert!(message.contains(".reads::<Secret>()"), "{message}");
    assert!(
        message.contains("require_declared_reads(false)"),
        "{message}"
    );
    // The manager's own rules count too: its election lists and watches its Lease.
    declared
        .check::<k8s_openapi::api::coordination::v1::Lease>(Some("apps"))
        .unwrap();

    // Opted out (RBAC by hand), or only rendering: no check.
    let by_hand = Manager::builder(offline_client().unwrap())
        .health_probe_address(None)
        .metrics_address(None)
        .require_declared_reads(false)
        .build()
        .unwrap();
    assert!(by_hand.declared_reads().is_none());
    assert!(self::manager(None).declared_reads().is_none());
}

#[tokio::test]
async fn a_fleet_controllers_permissions_are_rendered_where_a_members_cache_watches() {
    // The home cache reads every namespace; the members' read `apps`.
    let manager = manager(None);
    let fleet = rudder::multicluster::Fleet::builder(&manager)
        .cache(|cache| cache.default_namespace("apps"))
        .build()
        .unwrap();
    fleet
        .new_controller()
        .for_::<ConfigMap>()
        .owns::<Pod>()
        .reads::<Secret>()
        .permissions(Permissions::new().status::<ConfigMap>())
        .complete_with(|_| Noop)
        .unwrap();
    let rules = manager.permissions();
    let apps = RuleScope::Namespace("apps".into());
    for verb in Verb::INFORMER {
        for resource in ["configmaps", "pods", "secrets"] {
            assert!(rules.allows(&apps, "", resource, verb), "{resource} {verb}");
            assert!(
                !rules.allows(&RuleScope::Cluster, "", resource, verb),
                "{resource} {verb}"
            );
        }
    }
    for verb in Verb::CREATE_OR_PATCH {
        assert!(rules.allows(&apps, "", "pods", verb), "{verb}");
    }
    assert!(rules.allows(&apps, "", "configmaps/finalizers", Verb::Update));
    assert!(rules.allows(&apps, "", "configmaps/status", Verb::Patch));
    // The tools' recorder: Events about the primary type where it lives.
    assert!(rules.allows(&apps, "events.k8s.io", "events", Verb::Create));
    assert!(rules.allows(&apps, "events.k8s.io", "events", Verb::Patch));
    // And so in the rendered Role.
    let rendered = manifests(&manager, &DeployOptions::new("op", "ops", "example/op:1")).unwrap();
    let role = rendered
        .rbac
        .roles
        .iter()
        .find(|role| role.metadata.namespace.as_deref() == Some("apps"))
        .expect("a Role in the members' namespace");
    let rules = role.rules.as_deref().unwrap_or_default();
    assert!(
        rules
            .iter()
            .any(|rule| rule.resources.as_deref() == Some(&["events".to_owned()][..])),
        "{rules:?}"
    );
}

#[tokio::test]
async fn a_fleet_controller_refuses_one_rate_limiter_for_every_member() {
    let manager = manager(None);
    let fleet = rudder::multicluster::Fleet::builder(&manager)
        .build()
        .unwrap();
    let shared = ControllerOptions::new()
        .rate_limiter(rudder::workqueue::rate_limiter::default_controller_rate_limiter());
    let refused = fleet
        .new_controller()
        .for_::<ConfigMap>()
        .with_options(shared)
        .complete_with(|_| Noop);
    assert!(matches!(
        refused,
        Err(rudder::Error::Fleet(rudder::FleetError::SharedRateLimiter))
    ));
    // Nothing recorded by the refusal.
    assert!(
        !manager
            .permissions()
            .allows(&RuleScope::Cluster, "", "configmaps", Verb::List)
    );
    let per_instance = ControllerOptions::new()
        .rate_limiter_with(rudder::workqueue::rate_limiter::default_controller_rate_limiter);
    fleet
        .new_controller()
        .for_::<ConfigMap>()
        .with_options(per_instance)
        .complete_with(|_| Noop)
        .unwrap();
    assert!(
        manager
            .permissions()
            .allows(&RuleScope::Cluster, "", "configmaps", Verb::List)
    );
}
