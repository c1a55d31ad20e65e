//! The RBAC the builder derives is exact, on a real API server with RBAC on (and the
//! `OwnerReferencesPermissionEnforcement` admission plugin, which asks for the owner's
//! `finalizers` subresource from whoever sets `blockOwnerDeletion`): a memcached-shaped
//! operator (a custom resource owning a Deployment kept with `create_or_patch`, a finalizer,
//! a status replaced with `update_status`, Events, one of them repeated) runs its whole flow
//! as a ServiceAccount bound only to the Role rendered from its code, with no `forbidden`
//! error in its log or its `/metrics`; then, for each verb of each resource of that Role,
//! the same flow without that one verb meets a `forbidden` error, in the log and the metrics
//! alike: every verb is needed, not just sufficient.
//!
//! The flows that take verbs away run the operator's informers with paginated lists, as on
//! a server without streaming lists: a streaming list is a watch, so on this server an
//! informer would not use `list` at all, which the rendered RBAC grants for the servers
//! (and the fall-back) that need it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]
#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use rudder::cache::ListStrategy;
use rudder::client::{ClientError, Operation, has_finalizer, set_controller_reference};
use rudder::manager::rbac::{Permissions, Verb};
use rudder::manifests::DeployOptions;
use rudder::prelude::*;
use rudder_envtest::least_privilege::{
    FlowRun, ForbiddenWatch, GrantedRole, LogCapture, Outcome, forbidden_requests,
};
use rudder_envtest::{TestNamespace, TestUser};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// Everything logged, for the `forbidden` errors.
static LOG: LazyLock<&LogCapture> = LazyLock::new(LogCapture::global);

/// How long one step of a flow may take.
const STEP: Duration = Duration::from_secs(20);

const FINALIZER: &str = "cache.rudder.dev/finalizer";

/// A memcached: `size` replicas.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "cache.rudder.dev",
    version = "v1",
    kind = "Memcached",
    namespaced,
    status = "MemcachedStatus"
)]
struct MemcachedSpec {
    size: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct MemcachedStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
    #[serde(default)]
    ready_replicas: i32,
}

/// Keeps a Deployment of `size` replicas owned by each Memcached, with a finalizer, its
/// status, and an Event for each Deployment made or scaled.
struct Memcacheds {
    tools: Tools,
}

impl Reconciler for Memcacheds {
    type Error = ClientError;

    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, ClientError> {
        let client = self.tools.client();
        let Some(memcached) = client.get::<Memcached>(&request).await? else {
            return Ok(Action::done());
        };
        if memcached.metadata.deletion_timestamp.is_some() {
            if has_finalizer(&*memcached, FINALIZER) {
                self.note(&memcached, "Deleting", "finalizer released")
                    .await;
                client.remove_finalizer(&*memcached, FINALIZER).await?;
            }
            return Ok(Action::done());
        }
        if !has_finalizer(&*memcached, FINALIZER) {
            client.add_finalizer(&*memcached, FINALIZER).await?;
            return Ok(Action::done());
        }
        let name = memcached.name_any();
        let labels = BTreeMap::from([("memcached".to_owned(), name.clone())]);
        let (deployment, operation) = client
            .create_or_patch::<Deployment>(memcached.namespace().as_deref(), &name, |d| {
                set_controller_reference(&*memcached, d)?;
                d.spec.replicas = Some(memcached.spec.size);
                d.spec.selector = LabelSelector {
                    match_labels: Some(labels.clone()),
                    ..LabelSelector::default()
                };
                let template = &mut d.spec.template;
                template.metadata.get_or_insert_default().labels = Some(labels);
                let pod = template.spec.get_or_insert_default();
                if pod.containers.is_empty() {
                    pod.containers.push(Container {
                        name: "memcached".to_owned(),
                        image: Some("registry.k8s.io/pause:3.10".to_owned()),
                        ..Container::default()
                    });
                }
                Ok(())
            })
            .await?;
        match operation {
            Operation::Created => self.note(&memcached, "Created", "Deployment made").await,
            // The same reason each time: a repeat is a patch of the first Event's series.
            Operation::Updated => self.note(&memcached, "Scaled", "Deployment scaled").await,
            Operation::Unchanged => {}
        }
        let status = MemcachedStatus {
            observed_generation: memcached.metadata.generation,
            ready_replicas: deployment
                .status
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0),
        };
        if memcached.status.as_ref() != Some(&status) {
            let mut updated = (*memcached).clone();
            updated.status = Some(status);
            client.update_status(&updated).await?;
        }
        Ok(Action::done())
    }
}

impl Memcacheds {
    async fn note(&self, memcached: &Memcached, reason: &str, note: &str) {
        self.tools
            .record(memcached, EventType::Normal, reason, note)
            .await;
    }
}

/// The operator's manager, as its binary would build it: its cache on `namespace`, metrics
/// on a free port, its informers listing with `lists`.
async fn manager(
    client: kube::Client,
    namespace: &str,
    lists: ListStrategy,
    render_only: bool,
) -> Result<Manager, Box<dyn std::error::Error + Send + Sync>> {
    let namespace = namespace.to_owned();
    let manager = Manager::builder(client)
        .name("memcached")
        .health_probe_address(None)
        .metrics_address(Some(SocketAddr::from(([127, 0, 0, 1], 0))))
        .render_only(render_only)
        .cache(move |cache| cache.default_namespace(namespace).list_strategy(lists))
        .build()?;
    rudder::new_controller(&manager)
        .for_::<Memcached>()
        // Watched, kept with create_or_patch (get, create, patch), owner-referenced.
        .owns::<Deployment>()
        // The finalizer is patched on, the status replaced.
        .permissions(
            Permissions::new()
                .verbs::<Memcached>([Verb::Patch])
                .subresource::<Memcached>("status", [Verb::Update]),
        )
        .named("memcached")
        .complete_with(|tools| Memcacheds { tools })
        .await?;
    Ok(manager)
}

/// Waits for `check`, giving up on a `forbidden` error or after [`STEP`].
async fn step(
    watch: &ForbiddenWatch,
    what: &str,
    mut check: impl AsyncFnMut() -> bool,
) -> Result<(), Outcome> {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        if let Some(line) = watch.first().await.unwrap() {
            return Err(Outcome::Forbidden(line));
        }
        if check().await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Outcome::Stuck(what.to_owned()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The operator's flow for the Memcached `name`, the operator acting as `user` with its
/// informers listing with `lists`: made with size 1, scaled to 2 then 3 (two Events of one
/// reason: a series), deleted through the finalizer. With how it ended, and the API
/// requests answered 403 during the run according to the operator's `/metrics`.
async fn flow(ns: &TestNamespace, user: &TestUser, lists: ListStrategy, name: &str) -> FlowRun {
    LOG.clear();
    // The registry the manager's `/metrics` renders, read before it makes a request.
    let registry = rudder::manager::metrics::prometheus().unwrap();
    let before = forbidden_requests(&registry.render());
    let manager = match manager(user.client(), ns.name(), lists, false).await {
        Ok(manager) => Arc::new(manager),
        Err(error) => {
            return FlowRun {
                outcome: Outcome::Forbidden(format!("setup: {error}")),
                forbidden_in_metrics: forbidden_requests(&registry.render()) - before,
            };
        }
    };
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (manager, stop) = (Arc::clone(&manager), stop.clone());
        async move { manager.start(stop).await }
    });
    let metrics = rudder_envtest::poll::eventually("the metrics server", STEP, async || {
        manager.metrics_address()
    })
    .await;
    let watch = ForbiddenWatch::new(&LOG, metrics, before);
    let outcome = match steps(&watch, ns, name).await {
        Ok(()) => match watch.first().await.unwrap() {
            Some(line) => Outcome::Forbidden(line),
            None => Outcome::Completed,
        },
        Err(outcome) => outcome,
    };
    let in_metrics = watch.in_metrics().await.unwrap();
    stop.cancel();
    let _ = running.await;
    FlowRun {
        outcome,
        forbidden_in_metrics: in_metrics,
    }
}

async fn steps(watch: &ForbiddenWatch, ns: &TestNamespace, name: &str) -> Result<(), Outcome> {
    let memcacheds: Api<Memcached> = ns.api();
    let deployments: Api<Deployment> = ns.api();
    let events: Api<Event> = ns.api();
    memcacheds
        .create(
            &PostParams::default(),
            &Memcached::new(name, MemcachedSpec { size: 1 }),
        )
        .await
        .unwrap();
    let scaled_to = |size: i32, generation: i64| {
        let (memcacheds, deployments) = (memcacheds.clone(), deployments.clone());
        async move || {
            let replicas = deployments
                .get_opt(name)
                .await
                .unwrap()
                .and_then(|d| d.spec.replicas);
            let memcached = memcacheds.get(name).await.unwrap();
            replicas == Some(size)
                && memcached.finalizers().iter().any(|f| f == FINALIZER)
                && memcached.status.and_then(|s| s.observed_generation) == Some(generation)
        }
    };
    // The Events of `reason` about this Memcached: how many times it happened, in all.
    let happened = |reason: &'static str| {
        let events = events.clone();
        async move || {
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                .filter(|e| e.reason.as_deref() == Some(reason))
                .map(|e| e.series.as_ref().map_or(1, |s| s.count))
                .sum::<i32>()
        }
    };
    step(watch, "a Deployment of 1", scaled_to(1, 1)).await?;
    step(watch, "the Created Event", async || {
        happened("Created")().await >= 1
    })
    .await?;
    for (size, generation) in [(2, 2), (3, 3)] {
        let patch = serde_json::json!({ "spec": { "size": size } });
        memcacheds
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        step(watch, "scaled", scaled_to(size, generation)).await?;
    }
    // The second Scaled is counted on the first one's series: a patch of that Event.
    step(watch, "two Scaled Events, in one series", async || {
        happened("Scaled")().await >= 2
    })
    .await?;
    memcacheds
        .delete(name, &DeleteParams::background())
        .await
        .unwrap();
    step(watch, "deleted through the finalizer", async || {
        memcacheds.get_opt(name).await.unwrap().is_none()
    })
    .await?;
    Ok(())
}

/// Leaves nothing of the Memcached `name` behind (as the admin): its finalizer, itself, its
/// Deployment.
async fn clean_up(ns: &TestNamespace, name: &str) {
    let memcacheds: Api<Memcached> = ns.api();
    if memcacheds.get_opt(name).await.unwrap().is_some() {
        let _ = memcacheds
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "metadata": { "finalizers": null } })),
            )
            .await;
        let _ = memcacheds.delete(name, &DeleteParams::default()).await;
    }
    let deployments: Api<Deployment> = ns.api();
    let _ = deployments.delete(name, &DeleteParams::default()).await;
}

#[tokio::test]
async fn the_derived_role_of_a_memcached_operator_is_sufficient_and_every_verb_is_needed() {
    // The capture is the global subscriber from here on, before the operator logs.
    LazyLock::force(&LOG);
    let env = rudder_envtest::TestEnv::builder()
        .apiserver_arg("--enable-admission-plugins=OwnerReferencesPermissionEnforcement")
        .crds([Memcached::crd()])
        .shared()
        .await
        .unwrap();
    let ns = env.namespace("memcached-rbac").await.unwrap();
    let user = ns.service_account("operator").await.unwrap();
    let rendered = {
        let offline = rudder::manifests::offline_client().unwrap();
        let manager = manager(offline, ns.name(), ListStrategy::default(), true)
            .await
            .unwrap();
        rudder::manifests::manifests(
            &manager,
            &DeployOptions::new("memcached", ns.name(), "unused")
                .service_account(user.name())
                .create_namespace(false),
        )
        .unwrap()
    };
    // Watching one namespace: no ClusterRole, one Role there.
    assert!(rendered.rbac.cluster_role.is_none());
    let [role]: [Role; 1] = rendered.rbac.roles.clone().try_into().unwrap();
    let [binding]: [RoleBinding; 1] = rendered.rbac.role_bindings.clone().try_into().unwrap();
    let rules = role.rules.clone().unwrap();
    let verbs_of = |resource: &str| -> Vec<String> {
        let mut verbs: Vec<String> = rules
            .iter()
            .filter(|r| r.resources.iter().flatten().any(|r| r == resource))
            .flat_map(|r| r.verbs.clone())
            .collect();
        verbs.sort();
        verbs
    };
    // Exactly what the code uses, and nothing else.
    assert_eq!(
        verbs_of("memcacheds"),
        ["list", "patch", "watch"],
        "{rules:#?}"
    );
    assert_eq!(verbs_of("memcacheds/finalizers"), ["update"]);
    assert_eq!(verbs_of("memcacheds/status"), ["update"]);
    assert_eq!(
        verbs_of("deployments"),
        ["create", "get", "list", "patch", "watch"]
    );
    assert_eq!(verbs_of("events"), ["create", "patch"]);
    assert_eq!(
        rules
            .iter()
            .map(|r| r.resources.iter().flatten().count())
            .sum::<usize>(),
        5
    );
    let roles: Api<Role> = ns.api();
    let bindings: Api<RoleBinding> = ns.api();
    roles.create(&PostParams::default(), &role).await.unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    for rule in &rules {
        ns.wait_for_rule(&user, rule, true).await.unwrap();
    }

    // Sufficient, as the operator ships (streaming lists) and with paginated lists: the
    // whole flow, no forbidden error in the log or the metrics.
    for (lists, name) in [
        (ListStrategy::Streaming, "full-streaming"),
        (ListStrategy::Paginated, "full-paginated"),
    ] {
        let full = flow(&ns, &user, lists, name).await;
        eprintln!("{name}: {full}");
        assert!(full.is_clean(), "{name}: {full}");
        clean_up(&ns, name).await;
    }

    // Needed: each verb of each resource removed in turn, and the flow meets a forbidden
    // error, which the metrics count as well.
    let unneeded = ns
        .unneeded_verbs(&user, &[GrantedRole::Namespaced(role)], async |name| {
            let ran = flow(&ns, &user, ListStrategy::Paginated, name).await;
            eprintln!("{name}: {ran}");
            clean_up(&ns, name).await;
            ran
        })
        .await
        .unwrap();
    assert!(
        unneeded.is_empty(),
        "verbs whose removal met no forbidden error in both the log and /metrics: {unneeded:#?}"
    );
}
