//! Least privilege, on a real API server with RBAC on (and the
//! `OwnerReferencesPermissionEnforcement` admission plugin, which asks for the owner's
//! `finalizers` subresource from whoever sets `blockOwnerDeletion`): the operator runs its
//! whole flow (scale up, down, up again, delete through the finalizer) as a ServiceAccount
//! bound only to the Role rendered from its code, with no `forbidden` error logged and no
//! API request answered 403 in its `/metrics` (`rest_client_requests_total{code="403"}`);
//! then, for each rule of that Role, the same flow with that rule removed meets a
//! `forbidden` error, seen in the log and in the metrics alike, so every rule is needed, not
//! just sufficient.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use configmap_generator::{ConfigMapGenerator, ConfigMapGeneratorSpec, Settings};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, ResourceExt};
use rudder::manifests::DeployOptions;
use rudder_envtest::least_privilege::{
    FlowRun, ForbiddenWatch, GrantedRole, LogCapture, Outcome, forbidden_requests,
};
use rudder_envtest::{TestNamespace, TestUser};
use tokio_util::sync::CancellationToken;

/// Everything logged, for the `forbidden` errors.
static LOG: LazyLock<&LogCapture> = LazyLock::new(LogCapture::global);

/// How long one step of a flow may take.
const STEP: Duration = Duration::from_secs(20);

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

async fn generated(cms: &Api<ConfigMap>, name: &str) -> Vec<String> {
    let prefix = format!("{name}-");
    let mut names: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .map(|cm| cm.name_any())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    names.sort();
    names
}

/// The operator's flow for generator `name`, the operator acting as `user`: count 2, 1, 2,
/// then deletion through the finalizer. With how it ended, the API requests answered 403
/// during the run according to the operator's `/metrics`.
async fn flow(ns: &TestNamespace, user: &TestUser, settings: &Settings, name: &str) -> FlowRun {
    LOG.clear();
    // The registry the manager's `/metrics` renders, read before it makes a request.
    let registry = rudder::manager::metrics::prometheus().unwrap();
    let before = forbidden_requests(&registry.render());
    let manager = match configmap_generator::manager(user.client(), settings, false).await {
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
    let generators: Api<ConfigMapGenerator> = ns.api();
    let cms: Api<ConfigMap> = ns.api();
    let want = |count: u32| {
        (0..count)
            .map(|i| format!("{name}-{i}"))
            .collect::<Vec<_>>()
    };
    generators
        .create(
            &PostParams::default(),
            &ConfigMapGenerator::new(
                name,
                ConfigMapGeneratorSpec {
                    data: [("k".to_owned(), "v".to_owned())].into(),
                    count: 2,
                },
            ),
        )
        .await
        .unwrap();
    let status_is = |count: u32| {
        let generators = generators.clone();
        async move || {
            generators
                .get(name)
                .await
                .ok()
                .and_then(|g| g.status)
                .is_some_and(|s| s.generated == count)
        }
    };
    step(watch, "two ConfigMaps", async || {
        generated(&cms, name).await == want(2)
    })
    .await?;
    step(watch, "status 2", status_is(2)).await?;
    for count in [1, 2] {
        generators
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "spec": { "count": count } })),
            )
            .await
            .unwrap();
        step(watch, "scaled", async || {
            generated(&cms, name).await == want(count)
        })
        .await?;
        step(watch, "status follows", status_is(count)).await?;
    }
    generators
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    step(watch, "deleted through the finalizer", async || {
        generators.get_opt(name).await.unwrap().is_none()
    })
    .await?;
    // The last Event (CleanedUp) is recorded before the finalizer goes; a refused one is
    // logged as it is recorded.
    Ok(())
}

/// Leaves nothing of generator `name` behind (as the admin): its finalizer, itself, its
/// ConfigMaps.
async fn clean_up(ns: &TestNamespace, name: &str) {
    let generators: Api<ConfigMapGenerator> = ns.api();
    if generators.get_opt(name).await.unwrap().is_some() {
        let _ = generators
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "metadata": { "finalizers": null } })),
            )
            .await;
        let _ = generators.delete(name, &DeleteParams::default()).await;
    }
    let cms: Api<ConfigMap> = ns.api();
    for cm in generated(&cms, name).await {
        let _ = cms.delete(&cm, &DeleteParams::default()).await;
    }
}

#[tokio::test]
async fn the_generated_role_is_sufficient_and_every_rule_is_needed() {
    // The capture is the global subscriber from here on, before the operator logs.
    LazyLock::force(&LOG);
    let env = rudder_envtest::TestEnv::builder()
        .apiserver_arg("--enable-admission-plugins=OwnerReferencesPermissionEnforcement")
        .shared()
        .await
        .unwrap();
    env.install_crds([ConfigMapGenerator::crd()]).await.unwrap();
    let ns = env.namespace("cmgen-rbac").await.unwrap();
    let user = ns.service_account("operator").await.unwrap();
    let settings = Settings {
        health: None,
        metrics: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        namespace: Some(ns.name().to_owned()),
        leader_election_namespace: Some(ns.name().to_owned()),
        ..Settings::default()
    };
    let manifests = configmap_generator::manifests(
        &settings,
        DeployOptions::new("cmgen", ns.name(), "unused")
            .service_account(user.name())
            .create_namespace(false),
    )
    .await
    .unwrap();
    // Watching one namespace: no ClusterRole, one Role there (Lease included).
    assert!(manifests.rbac.cluster_role.is_none());
    let [role]: [Role; 1] = manifests.rbac.roles.clone().try_into().unwrap();
    let [binding]: [RoleBinding; 1] = manifests.rbac.role_bindings.clone().try_into().unwrap();
    let rules = role.rules.clone().unwrap();
    assert!(
        rules
            .iter()
            .all(|r| !r.verbs.iter().any(|v| v.contains('*'))
                && !r.resources.iter().flatten().any(|v| v.contains('*'))),
        "{rules:?}"
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

    // Sufficient: the whole flow, no forbidden error in the log or the metrics.
    let full = flow(&ns, &user, &settings, "full").await;
    eprintln!("with the generated Role: {full}");
    assert!(full.is_clean(), "with the generated Role: {full}");
    clean_up(&ns, "full").await;

    // Needed: each rule removed in turn, and the flow meets a forbidden error, which the
    // metrics count as well.
    let unneeded = ns
        .unneeded_rules(&user, &[GrantedRole::Namespaced(role)], async |name| {
            let ran = flow(&ns, &user, &settings, name).await;
            eprintln!("{name}: {ran}");
            clean_up(&ns, name).await;
            ran
        })
        .await
        .unwrap();
    assert!(
        unneeded.is_empty(),
        "rules whose removal met no forbidden error in both the log and /metrics: {unneeded:#?}"
    );
}
