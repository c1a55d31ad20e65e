//! The ChaosPod webhooks called by a real API server (its own test binary: the controller's
//! name is unique in a process, and the manager here declares it too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::chaos_pod;

use std::time::Duration;

use chaospod::{CONTROLLER, ChaosPod, ChaosPodSpec, Options};
use k8s_openapi::jiff::SignedDuration;
use kube::api::{Api, PostParams};
use rudder::webhook::manifest::ClientConfig;
use rudder_envtest::WebhookOptions;

/// The webhooks the operator registers, called by the real API server: a ChaosPod created
/// without `nextStop` gets one in the future; one the controller could not run is refused
/// with the reason.
#[tokio::test]
async fn webhooks_default_next_stop_and_refuse_what_cannot_run() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("chaospod-webhooks").await.unwrap();
    chaospod::install_crd(&ns.client()).await.unwrap();
    let (_, hooks) = chaospod::manifests(&ClientConfig::service("unused", "unused")).unwrap();
    let mutating = hooks.mutating.unwrap();
    assert_eq!(mutating.metadata.name.as_deref(), Some(CONTROLLER));
    let installed = ns
        .install_webhooks(WebhookOptions {
            mutating: vec![mutating],
            validating: hooks.validating.into_iter().collect(),
            ..WebhookOptions::default()
        })
        .await
        .unwrap();
    let options = Options {
        namespace: Some(ns.name().to_owned()),
        health_address: None,
        metrics_address: None,
        leader_election: None,
        webhooks: Some(
            rudder::webhook::Options::new()
                .bind_address(installed.addr())
                .cert_dir(installed.cert_dir()),
        ),
        webhook_certificates: None,
        secure_metrics: None,
    };
    let manager = std::sync::Arc::new(chaospod::manager(ns.client(), options).await.unwrap());
    let (stop, running) = support::start(&manager);
    rudder_envtest::poll::eventually("the webhook server", Duration::from_secs(30), async || {
        manager.webhook_address().await
    })
    .await;

    let chaospods: Api<ChaosPod> = ns.api();
    let before = k8s_openapi::jiff::Timestamp::now();
    let created = chaospods
        .create(
            &PostParams::default(),
            &chaos_pod("defaulted", Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let next_stop = created
        .spec
        .next_stop
        .expect("the defaulter set nextStop")
        .0;
    assert!(
        next_stop > before + SignedDuration::from_secs(50),
        "about a period from now: {next_stop}"
    );

    let mut empty = ChaosPod::new("empty", ChaosPodSpec::default());
    empty.spec.period_seconds = Some(5);
    let refused = chaospods
        .create(&PostParams::default(), &empty)
        .await
        .unwrap_err();
    match refused {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status.message.contains("spec.template.spec.containers"),
                "{}",
                status.message
            );
        }
        other => panic!("expected a refusal, got {other}"),
    }
    stop.cancel();
    running.await.unwrap().unwrap();
}
