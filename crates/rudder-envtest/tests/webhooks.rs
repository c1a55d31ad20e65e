//! Webhooks installed by rudder-envtest, called by the real API server over HTTPS: a tiny
//! test-only webhook server here (tokio-rustls and hyper, with the PEMs envtest hands out)
//! answers admission and conversion reviews.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PostParams};
use rudder_envtest::poll::eventually;
use rudder_envtest::{InstalledWebhooks, TestCrd, TestEnv, TestNamespace, WebhookOptions};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

const DENIAL: &str = "deny-me is not welcome here";
const DENY_HOOK: &str = "deny.envtest.example.com";

/// A webhook server for these tests; stopping it (or dropping it) closes its listener and
/// every connection the API server holds to it.
struct TestServer {
    task: tokio::task::JoinHandle<()>,
    /// `(path, namespace, name)` of every review it answered.
    seen: Arc<Mutex<Vec<(String, String, String)>>>,
}

impl TestServer {
    async fn start(hooks: &InstalledWebhooks) -> Self {
        let certs = CertificateDer::pem_slice_iter(hooks.cert_pem().as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(hooks.key_pem().as_bytes()).unwrap();
        let mut config =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind(hooks.addr()).await.unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen_by_server = seen.clone();
        let task = tokio::spawn(async move {
            // Connections live in this set, so aborting the task ends them too.
            let mut connections = JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let seen = seen_by_server.clone();
                connections.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req| {
                        let seen = seen.clone();
                        async move { Ok::<_, Infallible>(answer(req, &seen).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Self { task, seen }
    }

    async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    fn seen(&self) -> Vec<(String, String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers `/validate` (denies ConfigMaps named `deny-me`), `/mutate` (adds an annotation)
/// and `/convert` (changes the apiVersion and records who converted).
async fn answer(
    req: Request<Incoming>,
    seen: &Mutex<Vec<(String, String, String)>>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let review: Value = serde_json::from_slice(&body).unwrap();
    let reply = if path == "/convert" {
        let request = &review["request"];
        let desired = request["desiredAPIVersion"].as_str().unwrap().to_owned();
        let objects: Vec<Value> = request["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let mut o = o.clone();
                seen.lock().unwrap().push((
                    path.clone(),
                    o["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
                    o["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                ));
                o["apiVersion"] = json!(desired);
                o["spec"]["convertedBy"] = json!("test-webhook");
                o
            })
            .collect();
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "response": {
                "uid": request["uid"],
                "result": {"status": "Success"},
                "convertedObjects": objects,
            }
        })
    } else {
        let request = &review["request"];
        let name = request["name"].as_str().unwrap_or("").to_owned();
        seen.lock().unwrap().push((
            path.clone(),
            request["namespace"].as_str().unwrap_or("").to_owned(),
            name.clone(),
        ));
        let mut response = json!({"uid": request["uid"], "allowed": true});
        if path == "/validate" && name == "deny-me" {
            response["allowed"] = json!(false);
            response["status"] = json!({"code": 403, "message": DENIAL});
        }
        if path == "/mutate" {
            let patch = json!([{
                "op": "add",
                "path": "/metadata/annotations",
                "value": {"mutated-by": "test-webhook"},
            }]);
            let bytes = ByteString(serde_json::to_vec(&patch).unwrap());
            response["patchType"] = json!("JSONPatch");
            response["patch"] = serde_json::to_value(bytes).unwrap();
        }
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        })
    };
    Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&reply).unwrap())))
        .unwrap()
}

fn configmap_rules() -> Option<Vec<RuleWithOperations>> {
    Some(vec![RuleWithOperations {
        api_groups: Some(vec![String::new()]),
        api_versions: Some(vec!["v1".into()]),
        operations: Some(vec!["CREATE".into()]),
        resources: Some(vec!["configmaps".into()]),
        scope: Some("Namespaced".into()),
    }])
}

/// A validating configuration as a project's manifests would have it: a Service reference.
fn denying_configuration() -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some("deny-configmaps".into()),
            ..Default::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: DENY_HOOK.into(),
            client_config: WebhookClientConfig {
                service: Some(ServiceReference {
                    name: "webhook-service".into(),
                    namespace: "system".into(),
                    path: Some("/validate".into()),
                    port: Some(443),
                }),
                ..Default::default()
            },
            rules: configmap_rules(),
            failure_policy: Some("Fail".into()),
            side_effects: "None".into(),
            admission_review_versions: vec!["v1".into()],
            ..Default::default()
        }]),
    }
}

fn configmap(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn create(ns: &TestNamespace, name: &str) -> Result<ConfigMap, kube::Error> {
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &configmap(name))
        .await
}

fn api_message(result: Result<ConfigMap, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) => status.message,
        other => panic!("expected a rejection by the API server, got {other:?}"),
    }
}

#[tokio::test]
async fn a_validating_webhook_denies_deny_me_with_its_message_and_admits_others() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("validating").await.unwrap();
    let hooks = ns
        .install_webhooks(WebhookOptions {
            validating: vec![denying_configuration()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        hooks.validating_configurations(),
        [format!("deny-configmaps-{}", ns.name())]
    );
    let server = TestServer::start(&hooks).await;

    let message = api_message(create(&ns, "deny-me").await);
    assert!(message.contains(DENIAL), "{message}");
    assert!(message.contains(DENY_HOOK), "{message}");
    create(&ns, "welcome").await.unwrap();

    // The server saw both creates, in this namespace, on the path the Service named, and
    // never a probe.
    let seen = server.seen();
    assert_eq!(
        seen,
        [
            ("/validate".into(), ns.name().into(), "deny-me".into()),
            ("/validate".into(), ns.name().into(), "welcome".into()),
        ]
    );
    server.stop().await;
    hooks.uninstall().await.unwrap();
}

#[tokio::test]
async fn with_failure_policy_fail_a_stopped_server_rejects_creates() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("fail-closed").await.unwrap();
    // Installed, and enforced, before any server runs: the wait does not need one.
    let hooks = ns
        .install_webhooks(WebhookOptions {
            validating: vec![denying_configuration()],
            ..Default::default()
        })
        .await
        .unwrap();

    // No retry: once the install returns, the API server calls the webhook.
    let message = api_message(create(&ns, "before-start").await);
    assert!(
        message.contains(&format!("failed calling webhook \"{DENY_HOOK}\"")),
        "{message}"
    );

    let server = TestServer::start(&hooks).await;
    create(&ns, "while-serving").await.unwrap();
    server.stop().await;

    let message = api_message(create(&ns, "after-stop").await);
    assert!(
        message.contains(&format!("failed calling webhook \"{DENY_HOOK}\"")),
        "{message}"
    );
}

#[tokio::test]
async fn a_namespace_webhook_does_not_reach_other_namespaces() {
    let env = TestEnv::builder().shared().await.unwrap();
    let mine = env.namespace("scoped-mine").await.unwrap();
    let other = env.namespace("scoped-other").await.unwrap();
    // No server at all: every call would fail, so any object it reached would be rejected.
    let _hooks = mine
        .install_webhooks(WebhookOptions {
            validating: vec![denying_configuration()],
            ..Default::default()
        })
        .await
        .unwrap();
    api_message(create(&mine, "reached").await);
    create(&other, "not-reached").await.unwrap();
}

#[tokio::test]
async fn dropping_the_handle_removes_the_configuration_and_the_certificates() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("dropped").await.unwrap();
    let hooks = ns
        .install_webhooks(WebhookOptions {
            validating: vec![denying_configuration()],
            ..Default::default()
        })
        .await
        .unwrap();
    let name = hooks.validating_configurations()[0].clone();
    let cert_dir = hooks.cert_dir().to_owned();
    for file in ["tls.crt", "tls.key", "ca.crt"] {
        assert!(cert_dir.join(file).is_file(), "{file}");
    }
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(ns.client());
    let stored = configs.get(&name).await.unwrap();
    let url = stored.webhooks.unwrap()[0].client_config.url.clone();
    assert_eq!(url, Some(hooks.url("/validate")));
    api_message(create(&ns, "while-installed").await);

    drop(hooks);
    assert!(configs.get_opt(&name).await.unwrap().is_none());
    assert!(!cert_dir.exists());
    // The API server forgets the configuration asynchronously, as it learnt it.
    eventually(
        "creates to pass again",
        Duration::from_secs(10),
        async || create(&ns, "after-drop").await.ok(),
    )
    .await;
}

#[tokio::test]
async fn a_cluster_wide_mutating_webhook_changes_created_objects() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("mutating").await.unwrap();
    // Cluster-wide, so it selects only this test's objects by label, as a test sharing the
    // control plane must.
    let selector = BTreeMap::from([("mutate-me".to_owned(), ns.name().to_owned())]);
    let config = MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(format!("annotate-{}", ns.name())),
            ..Default::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: "annotate.envtest.example.com".into(),
            client_config: WebhookClientConfig {
                url: Some("https://example.com/mutate".into()),
                ..Default::default()
            },
            rules: configmap_rules(),
            object_selector: Some(LabelSelector {
                match_labels: Some(selector.clone()),
                ..Default::default()
            }),
            failure_policy: Some("Fail".into()),
            // Left empty: the install fills in `None` and `[v1]`.
            side_effects: String::new(),
            admission_review_versions: Vec::new(),
            ..Default::default()
        }]),
    };
    let hooks = env
        .install_webhooks(WebhookOptions {
            mutating: vec![config],
            ..Default::default()
        })
        .await
        .unwrap();
    let server = TestServer::start(&hooks).await;

    let mut cm = configmap("labelled");
    cm.metadata.labels = Some(selector);
    let created = ns
        .api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let annotations = created.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("mutated-by").map(String::as_str),
        Some("test-webhook")
    );
    let plain = create(&ns, "unlabelled").await.unwrap();
    assert!(plain.metadata.annotations.is_none());
    assert_eq!(
        server.seen(),
        [("/mutate".into(), ns.name().into(), "labelled".into())]
    );
    server.stop().await;
    hooks.uninstall().await.unwrap();
}

#[tokio::test]
async fn a_conversion_crd_converts_through_the_webhook_until_uninstalled() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("conversion").await.unwrap();
    let crd = TestCrd::new("envtest.example.com", "Gizmo", "gizmos")
        .versions(["v1", "v2"])
        .build();
    let hooks = ns
        .install_webhooks(WebhookOptions {
            conversion_crds: vec![crd],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(hooks.conversion_crds(), ["gizmos.envtest.example.com"]);
    let crds: Api<CustomResourceDefinition> = Api::all(ns.client());
    let stored = crds.get("gizmos.envtest.example.com").await.unwrap();
    let conversion = stored.spec.conversion.unwrap();
    assert_eq!(conversion.strategy, "Webhook");
    let webhook = conversion.webhook.unwrap();
    assert_eq!(webhook.conversion_review_versions, ["v1"]);
    let client_config = webhook.client_config.unwrap();
    assert_eq!(client_config.url, Some(hooks.url("/convert")));
    assert_eq!(
        client_config.ca_bundle,
        Some(ByteString(hooks.ca_pem().as_bytes().to_vec()))
    );

    let server = TestServer::start(&hooks).await;
    let gvk = |version: &str| GroupVersionKind::gvk("envtest.example.com", version, "Gizmo");
    let v1: Api<DynamicObject> =
        Api::namespaced_with(ns.client(), ns.name(), &ApiResource::from_gvk(&gvk("v1")));
    let v2: Api<DynamicObject> =
        Api::namespaced_with(ns.client(), ns.name(), &ApiResource::from_gvk(&gvk("v2")));
    let mut gizmo = DynamicObject::new("g", &ApiResource::from_gvk(&gvk("v1")));
    gizmo.data = json!({"spec": {"size": 3}});
    v1.create(&PostParams::default(), &gizmo).await.unwrap();
    let read = v2.get("g").await.unwrap();
    assert_eq!(read.data["spec"]["convertedBy"], "test-webhook");
    assert_eq!(read.data["spec"]["size"], 3);
    assert!(
        server
            .seen()
            .iter()
            .any(|(path, _, name)| path == "/convert" && name == "g")
    );
    server.stop().await;

    hooks.uninstall().await.unwrap();
    let stored = crds.get("gizmos.envtest.example.com").await.unwrap();
    assert_eq!(
        stored.spec.conversion.map(|c| c.strategy).as_deref(),
        Some("None")
    );
}

#[tokio::test]
async fn the_wait_reports_a_configuration_the_api_server_no_longer_enforces() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("not-enforced").await.unwrap();
    let hooks = ns
        .install_webhooks(WebhookOptions {
            validating: vec![denying_configuration()],
            ..Default::default()
        })
        .await
        .unwrap();
    hooks
        .wait_until_enforced(Duration::from_secs(1))
        .await
        .unwrap();

    // Deleted behind the install's back: once the API server has noticed, the probe's
    // dry-run create is admitted, and the wait says so instead of returning.
    let name = hooks.validating_configurations()[0].clone();
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(ns.client());
    configs.delete(&name, &Default::default()).await.unwrap();
    let err = eventually("the wait to fail", Duration::from_secs(10), async || {
        hooks
            .wait_until_enforced(Duration::from_millis(200))
            .await
            .err()
    })
    .await;
    let text = err.to_string();
    assert!(
        matches!(err, rudder_envtest::Error::WebhookNotEnforced { .. }),
        "{text}"
    );
    assert!(text.contains(&name), "{text}");
    assert!(text.contains("admitted without calling it"), "{text}");
}
