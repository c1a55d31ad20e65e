//! The ChaosPod controller end to end on a real API server: it creates the Pod it owns,
//! deletes it on schedule, creates the next one, and keeps the status.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::chaos_pod;

use std::time::Duration;

use chaospod::{ChaosPod, Options};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::SignedDuration;
use kube::ResourceExt as _;
use kube::api::{Api, PostParams};
use rudder::lease::leader_election::LeaderElectionConfig;
use rudder_envtest::poll::eventually;
use tokio_util::sync::CancellationToken;

/// How long a test waits for the operator to do something.
const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn pods_are_created_owned_stopped_on_schedule_and_recreated() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("chaospod").await.unwrap();
    chaospod::install_crd(&ns.client()).await.unwrap();
    let options = Options {
        namespace: Some(ns.name().to_owned()),
        health_address: None,
        metrics_address: None,
        leader_election: Some(
            LeaderElectionConfig::new(ns.name(), "chaospod-leader")
                .with_lease_duration(Duration::from_secs(4))
                .with_renew_deadline(Duration::from_secs(3))
                .with_retry_period(Duration::from_millis(500))
                .with_release_on_cancel(true),
        ),
        webhooks: None,
        webhook_certificates: None,
        secure_metrics: None,
    };
    let manager = chaospod::manager(ns.client(), options).await.unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let stop = stop.clone();
        async move { manager.start(stop).await }
    });

    let chaospods: Api<ChaosPod> = ns.api();
    let pods: Api<Pod> = ns.api();
    let chaos = chaospods
        .create(
            &PostParams::default(),
            &chaos_pod("chaos", Duration::from_secs(2)),
        )
        .await
        .unwrap();

    // The first Pod: named after the ChaosPod, from its template, controlled by it.
    let first = eventually("the first pod", WAIT, async || {
        pods.get_opt("chaos").await.unwrap()
    })
    .await;
    let owner = &first.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("ChaosPod", "chaos", chaos.uid().unwrap().as_str())
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(
        first.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some("registry.k8s.io/pause:3.9")
    );
    assert_eq!(first.labels().get("app").map(String::as_str), Some("chaos"));

    // Its stop time is in the spec, the run in the status.
    let started = eventually("the first run in the status", WAIT, async || {
        let c = chaospods.get("chaos").await.unwrap();
        let status = c.status.clone()?;
        (status.runs >= 1 && c.spec.next_stop.is_some()).then_some(c)
    })
    .await;
    let created = first.metadata.creation_timestamp.clone().unwrap().0;
    let next_stop = started.spec.next_stop.clone().unwrap().0;
    assert_eq!(next_stop, created + SignedDuration::from_secs(2));
    assert_eq!(started.status.unwrap().last_run.unwrap().0, created);

    // Deleted at that time, then a new Pod; the status counts both.
    let first_uid = first.uid().unwrap();
    let second = eventually("a new pod after the stop", WAIT, async || {
        let pod = pods.get_opt("chaos").await.unwrap()?;
        (pod.uid().unwrap() != first_uid).then_some(pod)
    })
    .await;
    // Counted exactly once each: every Pod but the running one was stopped (a count taken
    // twice would leave runs ahead of stops + 1 for good).
    let after = eventually(
        "the stop and the second run in the status",
        WAIT,
        async || {
            let status = chaospods.get("chaos").await.unwrap().status?;
            (status.stops >= 1 && status.runs == status.stops + 1).then_some(status)
        },
    )
    .await;
    let stopped_at = after.last_stop.unwrap().0;
    assert!(
        stopped_at >= next_stop,
        "stopped early: {stopped_at} < {next_stop}"
    );
    assert!(
        stopped_at.duration_since(next_stop) < SignedDuration::from_secs(5),
        "stopped late: {stopped_at}, due {next_stop}"
    );
    assert_eq!(after.last_stopped_uid.as_deref(), Some(first_uid.as_str()));
    assert!(chaospod_owns(&second));

    // And it said so, as the controller.
    let events: Api<Event> = ns.api();
    eventually("Started and Stopped events", WAIT, async || {
        let list = events.list(&Default::default()).await.unwrap();
        let reasons: Vec<&str> = list
            .items
            .iter()
            .filter(|e| e.reporting_controller.as_deref() == Some(chaospod::CONTROLLER))
            .filter_map(|e| e.reason.as_deref())
            .collect();
        (reasons.contains(&"Started") && reasons.contains(&"Stopped")).then_some(())
    })
    .await;

    stop.cancel();
    running.await.unwrap().unwrap();
}

fn chaospod_owns(pod: &Pod) -> bool {
    pod.owner_references()
        .iter()
        .any(|r| r.kind == "ChaosPod" && r.controller == Some(true))
}
