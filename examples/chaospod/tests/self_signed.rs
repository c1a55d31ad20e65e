//! The ChaosPod webhooks served with self-signed certificates (its own test binary: the
//! controller's name is unique in a process): the operator creates the certificate Secret,
//! injects the CA into the configurations it renders (installed with no `caBundle`), and
//! the API server then calls its webhooks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use support::{chaos_pod, create_webhook_configurations};

use std::net::SocketAddr;
use std::time::Duration;

use chaospod::{ChaosPod, ChaosPodSpec, Options};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use rudder::webhook::manifest::ClientConfig;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn self_signed_webhooks_are_injected_and_called() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("chaospod-self-signed").await.unwrap();
    chaospod::install_crd(&ns.client()).await.unwrap();
    let certificates =
        chaospod::self_signed_certificates("chaospod-certs", "chaospod-webhook", ns.name())
            .unwrap()
            .extra_names(["127.0.0.1"]);
    let options = Options {
        namespace: Some(ns.name().to_owned()),
        health_address: None,
        metrics_address: None,
        leader_election: None,
        webhooks: Some(
            rudder::webhook::Options::new().bind_address(SocketAddr::from(([127, 0, 0, 1], 0))),
        ),
        webhook_certificates: Some(certificates),
        secure_metrics: None,
    };
    let manager = std::sync::Arc::new(chaospod::manager(ns.client(), options).await.unwrap());
    let (stop, running) = support::start(&manager);
    let addr = rudder_envtest::poll::eventually("the webhook server", WAIT, async || {
        manager.webhook_address().await
    })
    .await;
    let secret: Option<Secret> = ns.api::<Secret>().get_opt("chaospod-certs").await.unwrap();
    assert!(
        secret.is_some(),
        "the operator created the certificate Secret"
    );

    // The configurations as rendered for a URL on loopback: no caBundle.
    let (_, hooks) = chaospod::manifests(&ClientConfig::url(format!("https://{addr}"))).unwrap();
    let (mutating, validating) = (hooks.mutating.unwrap(), hooks.validating.unwrap());
    assert!(
        mutating
            .webhooks
            .iter()
            .flatten()
            .all(|w| w.client_config.ca_bundle.is_none()),
        "rendered without a caBundle"
    );
    let (mutating_api, validating_api) =
        create_webhook_configurations(&ns, &mutating, &validating).await;

    // A ChaosPod that cannot run is refused by the validating webhook, with its reason: the
    // API server trusted the injected CA.
    let chaospods: Api<ChaosPod> = ns.api();
    let mut empty = ChaosPod::new("empty", ChaosPodSpec::default());
    empty.spec.period_seconds = Some(5);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let refusal =
        rudder_envtest::poll::eventually("the webhooks are called", WAIT, async || match chaospods
            .create(&dry_run, &empty)
            .await
        {
            Err(kube::Error::Api(status))
                if status.message.contains("spec.template.spec.containers") =>
            {
                Some(status.message)
            }
            _ => None,
        })
        .await;
    assert!(refusal.contains("denied the request"), "{refusal}");
    let created = chaospods
        .create(
            &PostParams::default(),
            &chaos_pod("defaulted", Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert!(created.spec.next_stop.is_some(), "the defaulter was called");

    stop.cancel();
    running.await.unwrap().unwrap();
    let name = mutating.metadata.name.unwrap();
    mutating_api
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let name = validating.metadata.name.unwrap();
    validating_api
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}
