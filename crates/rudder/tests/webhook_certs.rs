//! Self-signed webhook certificates against a real API server: the manager creates the
//! Secret, injects the CA into a configuration installed with an empty `caBundle`, and the
//! API server then calls the webhook; replicas share one CA; an overwritten bundle is put
//! back; a renewal under load fails no admission call.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::ObjectMeta;
use kube::{Client, ResourceExt};
use rudder::certs::{CA_BUNDLE, InjectTargets, SelfSignedConfig, TLS_CRT};
use rudder::prelude::*;
use rudder::webhook::KindConversion;
use rudder_envtest::poll::eventually;
use rudder_envtest::{NAMESPACE_LABEL, TestNamespace};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio_util::sync::CancellationToken;

mod support;
use support::gizmo::{self, v1, v2};
use support::{DENIAL, Rules};

const WAIT: Duration = Duration::from_secs(30);
fn certificates(ns: &TestNamespace, configuration: &str) -> SelfSignedConfig {
    SelfSignedConfig::new("webhook-certs", ns.name(), "webhook-service")
        .extra_names(["127.0.0.1"])
        .inject(InjectTargets::new().validating(configuration))
}

fn manager(ns: &TestNamespace, certs: SelfSignedConfig) -> Arc<Manager> {
    let namespace = ns.name().to_owned();
    let manager = Manager::builder(ns.client())
        .health_probe_address(Some(SocketAddr::from(([127, 0, 0, 1], 0))))
        .metrics_address(None)
        .cache(move |c| c.default_namespace(namespace))
        .webhook_options(
            rudder::webhook::Options::new().bind_address(SocketAddr::from(([127, 0, 0, 1], 0))),
        )
        .self_signed_webhook_certificates(certs)
        .build()
        .unwrap();
    rudder::new_webhook(&manager)
        .for_::<ConfigMap>()
        .validator(Rules)
        .complete()
        .unwrap();
    Arc::new(manager)
}

type Running = tokio::task::JoinHandle<Result<(), rudder::manager::Error>>;

async fn start(m: &Arc<Manager>) -> (CancellationToken, Running) {
    let (stop, running) = support::start(m);
    eventually("the webhook server serves", WAIT, async || {
        assert!(!running.is_finished(), "the manager ended early");
        m.webhook_address().await
    })
    .await;
    (stop, running)
}

async fn stop(stop: CancellationToken, running: Running) {
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// A validating configuration calling `addr` for ConfigMaps of `ns`, with no `caBundle`.
async fn install(ns: &TestNamespace, name: &str, addr: SocketAddr) {
    let configuration = ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "configmaps.certs.rudder.rs".to_owned(),
            client_config: WebhookClientConfig {
                url: Some(format!(
                    "https://{addr}{}",
                    rudder::webhook::validate_path::<ConfigMap>()
                )),
                ca_bundle: None,
                service: None,
            },
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".to_owned()]),
                operations: Some(vec!["CREATE".to_owned()]),
                resources: Some(vec!["configmaps".to_owned()]),
                scope: None,
            }]),
            namespace_selector: Some(LabelSelector {
                match_labels: Some([(NAMESPACE_LABEL.to_owned(), ns.name().to_owned())].into()),
                match_expressions: None,
            }),
            side_effects: "None".to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            failure_policy: Some("Fail".to_owned()),
            timeout_seconds: Some(5),
            ..ValidatingWebhook::default()
        }]),
    };
    let api: Api<ValidatingWebhookConfiguration> = Api::all(ns.client());
    api.create(&PostParams::default(), &configuration)
        .await
        .unwrap();
}

async fn uninstall(client: Client, name: &str) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
    api.delete(name, &DeleteParams::default()).await.unwrap();
}

/// The outcome of one admission call: `Ok` if the webhook was called and refused
/// `forbidden`, `Err` with what happened otherwise.
async fn call(ns: &TestNamespace) -> Result<(), String> {
    let cms: Api<ConfigMap> = ns.api();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("forbidden".to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    match cms.create(&dry_run, &cm).await {
        Err(kube::Error::Api(status)) if status.message.contains(DENIAL) => Ok(()),
        Err(other) => Err(other.to_string()),
        Ok(_) => Err("admitted without the webhook".to_owned()),
    }
}

async fn secret(ns: &TestNamespace) -> Secret {
    ns.api::<Secret>().get("webhook-certs").await.unwrap()
}

fn value(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

/// The caBundle (decoded) of every webhook of configuration `name`.
async fn bundles(client: Client, name: &str) -> (Vec<Option<String>>, String) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
    let configuration = api.get(name).await.unwrap();
    let version = configuration.resource_version().unwrap_or_default();
    let bundles = configuration
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| {
            w.client_config
                .ca_bundle
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        })
        .collect();
    (bundles, version)
}

/// A TLS client that trusts only `ca_pem`.
fn trusting(ca_pem: &str) -> tokio_rustls::TlsConnector {
    tokio_rustls::TlsConnector::from(rudder_envtest::tls::client_config_pem(ca_pem).unwrap())
}

/// The certificate `addr` presents to a client that trusts only `ca_pem` and checks the
/// name `127.0.0.1`: the handshake fails unless it chains to that CA and is for that name.
async fn presented(addr: SocketAddr, ca_pem: &str) -> Result<CertificateDer<'static>, String> {
    let connector = trusting(ca_pem);
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let certs = tls.get_ref().1.peer_certificates().unwrap_or_default();
    certs
        .first()
        .cloned()
        .map(CertificateDer::into_owned)
        .ok_or_else(|| "no certificate".to_owned())
}

fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

#[tokio::test]
async fn manager_creates_the_secret_and_injects_the_ca_the_api_server_then_trusts() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("certs-inject").await.unwrap();
    assert!(
        ns.api::<Secret>()
            .get_opt("webhook-certs")
            .await
            .unwrap()
            .is_none()
    );
    let name = format!("certs-inject-{}", ns.name());
    let m = manager(&ns, certificates(&ns, &name));
    let (token, running) = start(&m).await;

    // The manager created the Secret before serving, and serves its certificate.
    let created = secret(&ns).await;
    let ca = value(&created, CA_BUNDLE);
    assert_eq!(
        m.webhook_certificates().unwrap().ca_bundle(),
        Some(ca.clone())
    );
    let addr = m.webhook_address().await.unwrap();
    assert_eq!(
        presented(addr, &ca).await.unwrap(),
        der(&value(&created, TLS_CRT))
    );

    // Installed with no caBundle: the injector fills every webhook entry from the Secret.
    install(&ns, &name, addr).await;
    eventually("the CA is injected", WAIT, async || {
        let (bundles, _) = bundles(ns.client(), &name).await;
        (bundles == [Some(ca.clone())]).then_some(())
    })
    .await;
    eventually("the API server calls the webhook", WAIT, async || {
        call(&ns).await.ok()
    })
    .await;
    let cms: Api<ConfigMap> = ns.api();
    let plain = ConfigMap {
        metadata: ObjectMeta {
            name: Some("plain".to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    cms.create(&PostParams::default(), &plain).await.unwrap();

    stop(token, running).await;
    uninstall(ns.client(), &name).await;
}

#[tokio::test]
async fn an_overwritten_ca_bundle_is_put_back() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("certs-repair").await.unwrap();
    let name = format!("certs-repair-{}", ns.name());
    let m = manager(&ns, certificates(&ns, &name));
    let (token, running) = start(&m).await;
    install(&ns, &name, m.webhook_address().await.unwrap()).await;
    let ca = value(&secret(&ns).await, CA_BUNDLE);
    eventually("the API server calls the webhook", WAIT, async || {
        call(&ns).await.ok()
    })
    .await;

    // Someone (a Helm upgrade, say) writes garbage over the bundle.
    let api: Api<ValidatingWebhookConfiguration> = Api::all(ns.client());
    let mut configuration = api.get(&name).await.unwrap();
    configuration.webhooks.as_mut().unwrap()[0]
        .client_config
        .ca_bundle = Some(k8s_openapi::ByteString(b"garbage".to_vec()));
    let overwritten = api
        .replace(&name, &PostParams::default(), &configuration)
        .await
        .unwrap();
    let overwritten_version = overwritten.resource_version().unwrap();
    assert_eq!(
        overwritten.webhooks.unwrap()[0]
            .client_config
            .ca_bundle
            .as_ref()
            .unwrap()
            .0,
        b"garbage"
    );

    // A later version carries the Secret's bundle again, and calls succeed.
    eventually("the CA bundle is put back", WAIT, async || {
        let (bundles, version) = bundles(ns.client(), &name).await;
        (version != overwritten_version && bundles == [Some(ca.clone())]).then_some(())
    })
    .await;
    eventually("the API server calls the webhook again", WAIT, async || {
        call(&ns).await.ok()
    })
    .await;

    stop(token, running).await;
    uninstall(ns.client(), &name).await;
}

#[tokio::test]
async fn two_managers_started_at_once_serve_from_one_ca() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("certs-shared").await.unwrap();
    let name = format!("certs-shared-{}", ns.name());
    let (a, b) = (
        manager(&ns, certificates(&ns, &name)),
        manager(&ns, certificates(&ns, &name)),
    );
    let ((stop_a, running_a), (stop_b, running_b)) = tokio::join!(start(&a), start(&b));

    let stored = secret(&ns).await;
    let ca = value(&stored, CA_BUNDLE);
    let cert = der(&value(&stored, TLS_CRT));
    for m in [&a, &b] {
        assert_eq!(
            m.webhook_certificates().unwrap().ca_bundle(),
            Some(ca.clone())
        );
        // Each presents the Secret's certificate, which a client trusting only the Secret's
        // CA accepts for 127.0.0.1.
        let addr = m.webhook_address().await.unwrap();
        assert_eq!(presented(addr, &ca).await.unwrap(), cert);
    }

    stop(stop_a, running_a).await;
    stop(stop_b, running_b).await;
}

/// Admission calls made one after another until [`finish`](Self::finish), each of which must
/// reach the webhook.
struct Caller {
    calls: Arc<AtomicUsize>,
    done: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Caller {
    fn start(ns: &TestNamespace) -> Self {
        let calls = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let cms: Api<ConfigMap> = ns.api();
        let task = tokio::spawn({
            let (calls, done) = (Arc::clone(&calls), Arc::clone(&done));
            async move {
                let mut failures = Vec::new();
                while !done.load(Ordering::SeqCst) {
                    let dry_run = PostParams {
                        dry_run: true,
                        ..PostParams::default()
                    };
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some("forbidden".to_owned()),
                            ..ObjectMeta::default()
                        },
                        ..ConfigMap::default()
                    };
                    match cms.create(&dry_run, &cm).await {
                        Err(kube::Error::Api(status)) if status.message.contains(DENIAL) => {}
                        other => failures.push(format!("{other:?}")),
                    }
                    calls.fetch_add(1, Ordering::SeqCst);
                }
                failures
            }
        });
        Self { calls, done, task }
    }

    /// Makes 20 more calls, stops, and asserts that none failed.
    async fn finish(self) {
        let now = self.calls.load(Ordering::SeqCst);
        eventually("20 more calls", WAIT, async || {
            (self.calls.load(Ordering::SeqCst) >= now + 20).then_some(())
        })
        .await;
        self.done.store(true, Ordering::SeqCst);
        let failures = self.task.await.unwrap();
        let calls = self.calls.load(Ordering::SeqCst);
        assert!(
            failures.is_empty(),
            "{} of {calls} calls failed: {failures:?}",
            failures.len()
        );
        assert!(calls > 20, "{calls}");
    }
}

#[tokio::test]
async fn renewal_under_load_fails_no_admission_call() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("certs-rotate").await.unwrap();
    let name = format!("certs-rotate-{}", ns.name());
    // Valid 10 s: renewed with 5 s left, checked every 200 ms.
    let config = certificates(&ns, &name)
        .serving_validity(Duration::from_secs(10))
        .check_interval(Duration::from_millis(200));
    let m = manager(&ns, config);
    let (token, running) = start(&m).await;
    let addr = m.webhook_address().await.unwrap();
    install(&ns, &name, addr).await;
    eventually("the API server calls the webhook", WAIT, async || {
        call(&ns).await.ok()
    })
    .await;
    let first = secret(&ns).await;
    let ca = value(&first, CA_BUNDLE);
    let first_cert = value(&first, TLS_CRT);

    // The API server keeps calling while the certificate is renewed.
    let caller = Caller::start(&ns);
    let renewed = eventually("the serving certificate is renewed", WAIT, async || {
        let cert = value(&secret(&ns).await, TLS_CRT);
        (cert != first_cert).then_some(cert)
    })
    .await;
    assert_eq!(value(&secret(&ns).await, CA_BUNDLE), ca, "the CA stays");
    // The server presents the renewed certificate (or a later renewal: it renews every 5 s).
    eventually("the renewed certificate is served", WAIT, async || {
        let current = der(&value(&secret(&ns).await, TLS_CRT));
        let served = presented(addr, &ca).await.ok()?;
        (served == current && served != der(&first_cert)).then_some(())
    })
    .await;
    assert_ne!(der(&renewed), der(&first_cert));
    caller.finish().await;

    stop(token, running).await;
    uninstall(ns.client(), &name).await;
}

#[tokio::test]
async fn ca_rotation_under_load_fails_no_admission_call() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("certs-ca-rotate").await.unwrap();
    let name = format!("certs-ca-rotate-{}", ns.name());
    // The CA is valid 30 s: its rotation begins with 15 s left; the next CA signs 4 s after
    // it joined the bundle, and the old one leaves the bundle 4 s after that.
    let config = certificates(&ns, &name)
        .ca_validity(Duration::from_secs(30))
        .ca_overlap(Duration::from_secs(4))
        .check_interval(Duration::from_millis(200));
    let m = manager(&ns, config);
    let (token, running) = start(&m).await;
    let addr = m.webhook_address().await.unwrap();
    install(&ns, &name, addr).await;
    eventually("the API server calls the webhook", WAIT, async || {
        call(&ns).await.ok()
    })
    .await;
    let first = secret(&ns).await;
    let first_ca = value(&first, CA_BUNDLE);

    let caller = Caller::start(&ns);
    // Both CAs published together first.
    let both = eventually("the next CA is published", WAIT, async || {
        let bundle = value(&secret(&ns).await, CA_BUNDLE);
        (bundle.starts_with(&first_ca) && bundle.len() > first_ca.len()).then_some(bundle)
    })
    .await;
    eventually("both CAs are injected", WAIT, async || {
        let (bundles, _) = bundles(ns.client(), &name).await;
        (bundles == [Some(both.clone())]).then_some(())
    })
    .await;
    // Then the new CA alone, signing what is served.
    let new_ca = eventually("the old CA is dropped", WAIT, async || {
        let bundle = value(&secret(&ns).await, CA_BUNDLE);
        (both.ends_with(&bundle) && bundle != both).then_some(bundle)
    })
    .await;
    assert_ne!(new_ca, first_ca);
    eventually("a certificate of the new CA is served", WAIT, async || {
        let current = der(&value(&secret(&ns).await, TLS_CRT));
        let served = presented(addr, &new_ca).await.ok()?;
        (served == current).then_some(())
    })
    .await;
    eventually("the new CA alone is injected", WAIT, async || {
        let (bundles, _) = bundles(ns.client(), &name).await;
        (bundles == [Some(new_ca.clone())]).then_some(())
    })
    .await;
    caller.finish().await;

    stop(token, running).await;
    uninstall(ns.client(), &name).await;
}

struct Recorder(tokio::sync::mpsc::UnboundedSender<String>);

impl Reconciler for Recorder {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let _ = self.0.send(request.name().to_owned());
        Ok(Action::done())
    }
}

/// A CRD whose conversion webhook is installed without a `caBundle`, with an object stored
/// in v2: a controller watching v1 lists through the conversion, so its cache can sync only
/// once the CA is injected. Injection runs before the cache sync, so the manager starts.
#[tokio::test]
async fn conversion_crd_gets_the_ca_before_the_cache_syncs() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceConversion, CustomResourceDefinition, WebhookClientConfig as CrdClient,
        WebhookConversion,
    };

    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("certs-conversion").await.unwrap();
    // A port for the webhook server, known before the CRD that calls it is installed.
    let port = rudder_envtest::free_port().unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut crd = gizmo::crd();
    let crd_name = crd.metadata.name.clone().unwrap();
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".to_owned(),
        webhook: Some(WebhookConversion {
            client_config: Some(CrdClient {
                url: Some(format!("https://{addr}{}", rudder::webhook::CONVERT_PATH)),
                ca_bundle: None,
                service: None,
            }),
            conversion_review_versions: vec!["v1".to_owned()],
        }),
    });
    env.install_crds([crd.clone()]).await.unwrap();
    let stored: Api<v2::Gizmo> = ns.api();
    stored
        .create(
            &PostParams::default(),
            &v2::Gizmo::new("w", v2::GizmoSpec { length: 4 }),
        )
        .await
        .unwrap();

    let namespace = ns.name().to_owned();
    let manager = Manager::builder(ns.client())
        .health_probe_address(None)
        .metrics_address(None)
        .cache(move |c| c.default_namespace(namespace))
        .webhook_options(rudder::webhook::Options::new().bind_address(addr))
        .self_signed_webhook_certificates(
            SelfSignedConfig::new("webhook-certs", ns.name(), "webhook-service")
                .extra_names(["127.0.0.1"])
                .inject(InjectTargets::new().crd(&crd_name)),
        )
        .build()
        .unwrap();
    rudder::new_webhook(&manager)
        .for_::<v2::Gizmo>()
        .conversion(
            KindConversion::<v2::Gizmo>::hub().spoke::<v1::Gizmo>(),
            &crd,
        )
        .complete()
        .unwrap();
    let (tx, mut reconciled) = tokio::sync::mpsc::unbounded_channel();
    rudder::new_controller(&manager)
        .for_::<v1::Gizmo>()
        .named("gizmo-v1")
        .complete(Recorder(tx))
        .await
        .unwrap();
    let m = Arc::new(manager);
    let (token, running) = start(&m).await;

    // The controller on v1 saw the object stored in v2: its cache synced through the
    // conversion webhook, called with the injected CA.
    let name = tokio::time::timeout(WAIT, reconciled.recv())
        .await
        .expect("the v1 controller reconciled within the wait")
        .unwrap();
    assert_eq!(name, "w");
    let ca = value(&secret(&ns).await, CA_BUNDLE);
    let crds: Api<CustomResourceDefinition> = Api::all(ns.client());
    let injected = crds.get(&crd_name).await.unwrap().spec.conversion.unwrap();
    let bundle = injected
        .webhook
        .unwrap()
        .client_config
        .unwrap()
        .ca_bundle
        .unwrap();
    assert_eq!(String::from_utf8(bundle.0).unwrap(), ca);
    let old: Api<v1::Gizmo> = ns.api();
    assert_eq!(old.get("w").await.unwrap().spec.size, 4);

    stop(token, running).await;
    crds.delete(&crd_name, &DeleteParams::default())
        .await
        .unwrap();
}

/// `GET path` over HTTPS to `addr`, trusting only `ca_pem` and checking the name
/// `127.0.0.1`, with `token` as the bearer token: the status code.
async fn https_get(addr: SocketAddr, ca_pem: &str, path: &str, token: Option<&str>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let connector = trusting(ca_pem);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
    let mut tls = connector.connect(name, tcp).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"))
}

#[tokio::test]
async fn secure_metrics_serve_the_self_signed_certificate() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("certs-metrics").await.unwrap();
    let prometheus = ns.service_account("prometheus").await.unwrap();
    ns.grant_non_resource_urls(&prometheus, &["get"], &["/metrics"])
        .await
        .unwrap();
    let namespace = ns.name().to_owned();
    let loopback = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    // Without the self-signed source, the option is refused when the manager is built.
    let refused = Manager::builder(ns.client())
        .metrics_address(loopback)
        .secure_metrics(rudder::manager::SecureMetrics::self_signed())
        .build();
    assert!(
        matches!(
            refused,
            Err(rudder::manager::BuildError::SecureMetricsWithoutSelfSigned)
        ),
        "{refused:?}"
    );

    let m = Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(loopback)
            .metrics_address(loopback)
            .secure_metrics(rudder::manager::SecureMetrics::self_signed())
            .cache(move |c| c.default_namespace(namespace))
            .self_signed_webhook_certificates(
                SelfSignedConfig::new("webhook-certs", ns.name(), "webhook-service")
                    .extra_names(["127.0.0.1"]),
            )
            .build()
            .unwrap(),
    );
    let (token, running) = support::start(&m);
    let addr = eventually("the metrics server listens", WAIT, async || {
        assert!(!running.is_finished(), "the manager ended early");
        m.metrics_address()
    })
    .await;
    // The Secret the manager created holds the CA that the metrics certificate chains to.
    let created = eventually("the Secret is created", WAIT, async || {
        ns.api::<Secret>().get_opt("webhook-certs").await.unwrap()
    })
    .await;
    let ca = value(&created, CA_BUNDLE);
    let served = eventually("the metrics server has its certificate", WAIT, async || {
        presented(addr, &ca).await.ok()
    })
    .await;
    assert_eq!(served, der(&value(&created, TLS_CRT)));
    assert_eq!(
        https_get(addr, &ca, "/metrics", Some(prometheus.token())).await,
        200
    );
    assert_eq!(https_get(addr, &ca, "/metrics", None).await, 401);
    stop(token, running).await;
}
