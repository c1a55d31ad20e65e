//! The observe layer on a real API server: a client built from a `Config` with the layer in
//! its own stack hands every answer to each observer once, with its status (200, 404, 403),
//! and a request that gets no answer as `Answer::None`; the counting observer's counter
//! moves with it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use http::{Method, StatusCode};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use rudder_client::layers::{self, Answer, ObserveLayer, Observer};
use rudder_envtest::TestEnv;

/// Every answer seen, in order.
#[derive(Default)]
struct Seen(Mutex<Vec<(Method, Answer)>>);

impl Observer for Seen {
    fn observe(&self, method: &Method, answer: Answer) {
        self.0.lock().unwrap().push((method.clone(), answer));
    }
}

impl Seen {
    fn take(&self) -> Vec<(Method, Answer)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

#[tokio::test]
async fn every_answer_reaches_every_observer_once() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("client-layers").await.unwrap();
    let first = Arc::new(Seen::default());
    let second = Arc::new(Seen::default());
    let layer = ObserveLayer::new()
        .observe_shared(Arc::clone(&first) as Arc<dyn Observer>)
        .observe_shared(Arc::clone(&second) as Arc<dyn Observer>);
    let client = layers::build(env.config().clone(), &layer).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, ns.name());

    let object = ConfigMap {
        metadata: ObjectMeta {
            name: Some("observed".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &object).await.unwrap();
    api.get("observed").await.unwrap();
    assert!(api.get_opt("absent").await.unwrap().is_none());
    let status = |code| Answer::Status(StatusCode::from_u16(code).unwrap());
    let expected = vec![
        (Method::POST, status(201)),
        (Method::GET, status(200)),
        (Method::GET, status(404)),
    ];
    assert_eq!(first.take(), expected);
    assert_eq!(second.take(), expected);

    // A user without RBAC: its answers are 403s, observed as such.
    let nobody = ns.service_account("nobody").await.unwrap();
    let mut config = env.config().clone();
    config.auth_info = kube::config::AuthInfo {
        token: Some(nobody.token().to_owned().into()),
        ..kube::config::AuthInfo::default()
    };
    let refused = layers::build(config, &layer).unwrap();
    let secrets: Api<Secret> = Api::namespaced(refused, ns.name());
    let error = secrets.get("any").await.unwrap_err();
    assert!(
        matches!(&error, kube::Error::Api(status) if status.code == 403),
        "{error:?}"
    );
    assert_eq!(first.take(), vec![(Method::GET, status(403))]);
}

#[tokio::test]
async fn a_request_with_no_answer_is_observed_as_none() {
    // A port nothing listens on: bound, then closed, so the connection is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
    let seen = Arc::new(Seen::default());
    let layer = ObserveLayer::new().observe_shared(Arc::clone(&seen) as Arc<dyn Observer>);
    let api: Api<ConfigMap> = Api::namespaced(layers::build(config, &layer).unwrap(), "default");
    assert!(api.get("any").await.is_err());
    assert_eq!(seen.take(), vec![(Method::GET, Answer::None)]);
}
