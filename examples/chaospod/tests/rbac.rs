//! Least privilege for ChaosPod, on a real API server with RBAC on (and the
//! `OwnerReferencesPermissionEnforcement` admission plugin): the demo's scenario (webhooks
//! served with self-signed certificates the operator keeps in a Secret and injects into the
//! webhook configurations; a ChaosPod defaulted, an invalid one refused; Pods run, stopped
//! on schedule and run again, counted in the status, with Events; a leader elected) runs as
//! a ServiceAccount bound only to the Role and ClusterRole rendered from the code, with no
//! `forbidden` error in its log and no API request answered 403 in its `/metrics`
//! (`rest_client_requests_total{code="403"}`); then each rule removed in turn makes the
//! scenario meet one, seen in the log and in the metrics alike.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod support;
use support::{chaos_pod, create_webhook_configurations};

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use chaospod::{ChaosPod, ChaosPodSpec, Options};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use rudder::ErrorChain;
use rudder::lease::leader_election::LeaderElectionConfig;
use rudder::manifests::DeployOptions;
use rudder::webhook::manifest::ClientConfig;
use rudder_envtest::least_privilege::{
    FlowRun, ForbiddenWatch, GrantedRole, LogCapture, Outcome, forbidden_requests,
};
use rudder_envtest::{TestNamespace, TestUser};
use tokio_util::sync::CancellationToken;

/// Everything logged, for the `forbidden` errors.
static LOG: LazyLock<&LogCapture> = LazyLock::new(LogCapture::global);

const STEP: Duration = Duration::from_secs(20);

/// The Secret the operator keeps its certificates in.
const SECRET: &str = "chaospod-certs";

/// Polls `check` until it gives a value, giving up on a `forbidden` error in the log or the
/// metrics (or a manager that ended with one) or after [`STEP`].
async fn step<T>(
    what: &str,
    (watch, ended): (&ForbiddenWatch, &Mutex<Option<String>>),
    mut check: impl AsyncFnMut() -> Option<T>,
) -> Result<T, Outcome> {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        if let Some(outcome) = forbidden(what, watch, ended).await {
            return Err(outcome);
        }
        if let Some(value) = check().await {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Outcome::Stuck(what.to_owned()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The first `forbidden` error met: logged, ending the manager, or counted in its metrics;
/// or the manager's end for another reason.
async fn forbidden(
    what: &str,
    watch: &ForbiddenWatch,
    ended: &Mutex<Option<String>>,
) -> Option<Outcome> {
    if let Some(line) = LOG.forbidden_lines().into_iter().next() {
        return Some(Outcome::Forbidden(line));
    }
    let scraped = watch.first().await;
    // A manager that ended took its metrics server with it: the scrape may fail just before
    // the end is recorded.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(error) = ended.lock().unwrap_or_else(PoisonError::into_inner).clone() {
            return Some(if error.to_lowercase().contains("forbidden") {
                Outcome::Forbidden(error)
            } else {
                Outcome::Stuck(format!("{what}: the manager ended: {error}"))
            });
        }
        match &scraped {
            Ok(line) => return line.clone().map(Outcome::Forbidden),
            Err(error) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: the manager runs, but {error}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

fn options(ns: &str, port: u16) -> Options {
    let certificates = chaospod::self_signed_certificates(SECRET, "chaospod-webhook", ns)
        .unwrap()
        .extra_names(["127.0.0.1"]);
    Options {
        namespace: Some(ns.to_owned()),
        health_address: None,
        metrics_address: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        leader_election: Some(
            LeaderElectionConfig::new(ns, "chaospod-leader")
                .with_lease_duration(Duration::from_secs(4))
                .with_renew_deadline(Duration::from_secs(3))
                .with_retry_period(Duration::from_millis(500))
                .with_release_on_cancel(true),
        ),
        webhooks: Some(
            rudder::webhook::Options::new().bind_address(SocketAddr::from(([127, 0, 0, 1], port))),
        ),
        webhook_certificates: Some(certificates),
        secure_metrics: None,
    }
}

/// The demo's scenario for ChaosPod `name`, the operator acting as `user`. With how it
/// ended, the API requests answered 403 during the run according to the operator's
/// `/metrics`.
async fn scenario(ns: &TestNamespace, user: &TestUser, port: u16, name: &str) -> FlowRun {
    LOG.clear();
    // The registry the manager's `/metrics` renders, read before it makes a request.
    let registry = rudder::manager::metrics::prometheus().unwrap();
    let before = forbidden_requests(&registry.render());
    let ended = Arc::new(Mutex::new(None));
    let manager = match chaospod::manager(user.client(), options(ns.name(), port)).await {
        Ok(manager) => Arc::new(manager),
        Err(error) => {
            let setup = Outcome::Forbidden(format!("setup: {}", ErrorChain(&error)));
            return FlowRun {
                outcome: setup,
                forbidden_in_metrics: forbidden_requests(&registry.render()) - before,
            };
        }
    };
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (manager, stop, ended) = (Arc::clone(&manager), stop.clone(), Arc::clone(&ended));
        async move {
            if let Err(error) = manager.start(stop).await {
                *ended.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(ErrorChain(&error).to_string());
            }
        }
    });
    let metrics = rudder_envtest::poll::eventually("the metrics server", STEP, async || {
        manager.metrics_address()
    })
    .await;
    let watch = ForbiddenWatch::new(&LOG, metrics, before);
    let outcome = match steps(ns, name, (&watch, &ended)).await {
        Ok(()) => forbidden("the end", &watch, &ended)
            .await
            .unwrap_or(Outcome::Completed),
        Err(outcome) => outcome,
    };
    // From the metrics server while the manager runs; from the registry it rendered once
    // the manager ended (with its server).
    let in_metrics = match watch.in_metrics().await {
        Ok(n) => n,
        Err(_)
            if ended
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some() =>
        {
            forbidden_requests(&registry.render()) - before
        }
        Err(error) => panic!("{error}"),
    };
    stop.cancel();
    let _ = running.await;
    FlowRun {
        outcome,
        forbidden_in_metrics: in_metrics,
    }
}

async fn steps(
    ns: &TestNamespace,
    name: &str,
    watched: (&ForbiddenWatch, &Mutex<Option<String>>),
) -> Result<(), Outcome> {
    let chaospods: Api<ChaosPod> = ns.api();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    // An invalid ChaosPod is refused by the validating webhook (the API server trusts the
    // injected CA).
    let mut empty = ChaosPod::new("empty", ChaosPodSpec::default());
    empty.spec.period_seconds = Some(5);
    step(
        "the validating webhook refuses",
        watched,
        async || match chaospods.create(&dry_run, &empty).await {
            Err(kube::Error::Api(status)) if status.message.contains("denied the request") => {
                Some(())
            }
            _ => None,
        },
    )
    .await?;
    // A valid one is defaulted (nextStop set) and created.
    let chaos = chaos_pod(name, Duration::from_secs(1));
    let created = step("created through the defaulter", watched, async || {
        chaospods.create(&PostParams::default(), &chaos).await.ok()
    })
    .await?;
    if created.spec.next_stop.is_none() {
        return Err(Outcome::Stuck("the defaulter set no nextStop".to_owned()));
    }
    // Run, stopped on schedule, run again: counted in the status.
    step("two runs and a stop", watched, async || {
        let status = chaospods.get(name).await.ok()?.status?;
        (status.runs >= 2 && status.stops >= 1).then_some(())
    })
    .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> = ns.api();
    step("Started and Stopped events", watched, async || {
        let list = events.list(&Default::default()).await.ok()?;
        let reasons: Vec<String> = list
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter_map(|e| e.reason)
            .collect();
        (reasons.iter().any(|r| r == "Started") && reasons.iter().any(|r| r == "Stopped"))
            .then_some(())
    })
    .await?;
    Ok(())
}

/// Deletes ChaosPod `name` and its Pods (no garbage collector runs here), and the
/// certificate Secret, so that each run creates it again: the only request that needs the
/// Secret rule not scoped to its name.
async fn clean_up(ns: &TestNamespace, name: &str) {
    let chaospods: Api<ChaosPod> = ns.api();
    let _ = chaospods.delete(name, &DeleteParams::default()).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    let _ = pods.delete(name, &DeleteParams::default()).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = ns.api();
    let _ = secrets.delete(SECRET, &DeleteParams::default()).await;
}

#[tokio::test]
async fn the_generated_rbac_is_sufficient_and_every_rule_is_needed() {
    // The capture is the global subscriber from here on, before the operator logs.
    LazyLock::force(&LOG);
    let env = rudder_envtest::TestEnv::builder()
        .apiserver_arg("--enable-admission-plugins=OwnerReferencesPermissionEnforcement")
        .shared()
        .await
        .unwrap();
    let ns = env.namespace("chaospod-rbac").await.unwrap();
    chaospod::install_crd(&ns.client()).await.unwrap();
    let user = ns.service_account("operator").await.unwrap();
    // A fixed port, so the webhook configurations can point at it before the operator runs;
    // outside the ephemeral range, so no connection takes it between two runs.
    let port = rudder_envtest::free_port().unwrap();

    let manifests = chaospod::deploy_manifests(
        options(ns.name(), port),
        DeployOptions::new(chaospod::CONTROLLER, ns.name(), "unused")
            .service_account(user.name())
            .create_namespace(false),
    )
    .await
    .unwrap();
    let role = manifests.rbac.roles[0].clone();
    assert_eq!(manifests.rbac.roles.len(), 1);
    let cluster_role = manifests.rbac.cluster_role.clone().unwrap();
    // The Secret and the webhook configurations are reached by name, all but the Secret's
    // creation: the rules say so, and the runs below show the operator needs no more.
    let (_, hooks) =
        chaospod::manifests(&ClientConfig::service("chaospod-webhook", ns.name())).unwrap();
    let own = [
        hooks.mutating.unwrap().name_any(),
        hooks.validating.unwrap().name_any(),
    ];
    let rules = role.rules.clone().unwrap();
    let secret_rules: Vec<_> = rules
        .iter()
        .filter(|r| r.resources.as_deref() == Some(&["secrets".to_owned()][..]))
        .collect();
    assert_eq!(secret_rules.len(), 2, "{secret_rules:#?}");
    for rule in secret_rules {
        match rule.resource_names.as_deref() {
            None => assert_eq!(rule.verbs, ["create"]),
            Some(names) => {
                assert_eq!(names, [SECRET]);
                assert_eq!(rule.verbs, ["get", "list", "watch", "update"]);
            }
        }
    }
    let webhook_rules: Vec<_> = cluster_role
        .rules
        .iter()
        .flatten()
        .filter(|r| {
            r.api_groups.as_deref() == Some(&["admissionregistration.k8s.io".to_owned()][..])
        })
        .collect();
    assert!(!webhook_rules.is_empty());
    for rule in webhook_rules {
        let names = rule.resource_names.clone().unwrap_or_default();
        assert!(
            !names.is_empty() && names.iter().all(|n| own.contains(n)),
            "{rule:?} reaches beyond {own:?}"
        );
    }
    let mut rbac: Vec<serde_json::Value> = vec![
        serde_json::to_value(&role).unwrap(),
        serde_json::to_value(&cluster_role).unwrap(),
    ];
    rbac.extend(
        manifests
            .rbac
            .role_bindings
            .iter()
            .map(|b| serde_json::to_value(b).unwrap()),
    );
    rbac.push(serde_json::to_value(manifests.rbac.cluster_role_binding.as_ref().unwrap()).unwrap());
    env.apply(&rbac, false).await.unwrap();

    // The webhook configurations, as rendered for a URL on loopback (no caBundle: the
    // operator injects it).
    let (_, hooks) =
        chaospod::manifests(&ClientConfig::url(format!("https://127.0.0.1:{port}"))).unwrap();
    let (mutating, validating) = (hooks.mutating.unwrap(), hooks.validating.unwrap());
    let (mutating_api, validating_api) =
        create_webhook_configurations(&ns, &mutating, &validating).await;

    let roles = [
        GrantedRole::Namespaced(role.clone()),
        GrantedRole::Cluster(cluster_role.clone()),
    ];
    for role in &roles {
        for rule in role.rules() {
            ns.wait_for_rule(&user, &rule, true).await.unwrap();
        }
    }

    let full = scenario(&ns, &user, port, "full").await;
    eprintln!("with the generated roles: {full}");
    assert!(full.is_clean(), "with the generated roles: {full}");
    clean_up(&ns, "full").await;

    let unneeded = ns
        .unneeded_rules(&user, &roles, async |name| {
            let ran = scenario(&ns, &user, port, name).await;
            eprintln!("{name}: {ran}");
            clean_up(&ns, name).await;
            ran
        })
        .await
        .unwrap();
    let _ = mutating_api
        .delete(&mutating.name_any(), &DeleteParams::default())
        .await;
    let _ = validating_api
        .delete(&validating.name_any(), &DeleteParams::default())
        .await;
    assert!(
        unneeded.is_empty(),
        "rules whose removal met no forbidden error in both the log and /metrics: {unneeded:#?}"
    );
}
