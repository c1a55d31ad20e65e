//! Webhooks declared with `rudder::new_webhook`, served by the manager over HTTPS and called
//! by a real API server (rudder-envtest installs the configurations the facade renders).

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use rudder::prelude::*;
use rudder::webhook::KindConversion;
use rudder::webhook::manifest::ClientConfig;
use rudder_envtest::poll::eventually;
use rudder_envtest::{InstalledWebhooks, TestNamespace, WebhookOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod support;
use support::gizmo::{self, v1, v2};
use support::{DENIAL, Label, Rules, get};

const WAIT: Duration = Duration::from_secs(30);

fn declare_admission(manager: &Manager) {
    rudder::new_webhook(manager)
        .for_::<ConfigMap>()
        .defaulter(Label)
        .validator(Rules)
        .complete()
        .unwrap();
}

/// The configurations the facade renders for what `declare` registers (the endpoint is
/// rewritten by the install).
fn options(declare: impl Fn(&Manager), ns: &TestNamespace) -> WebhookOptions {
    let scratch = Manager::builder(ns.client())
        .health_probe_address(None)
        .metrics_address(None)
        .build()
        .unwrap();
    declare(&scratch);
    let mut crds = vec![gizmo::crd()];
    let manifests = rudder::webhook_manifests(
        &scratch,
        "rudder-test",
        &ClientConfig::service("unused", "unused"),
        &mut crds,
    );
    let converts = crds[0].spec.conversion.is_some();
    WebhookOptions {
        mutating: manifests.mutating.into_iter().collect(),
        validating: manifests.validating.into_iter().collect(),
        conversion_crds: if converts { crds } else { Vec::new() },
    }
}

fn manager(ns: &TestNamespace, installed: &InstalledWebhooks) -> Arc<Manager> {
    manager_with(ns, installed, |options| options)
}

/// [`manager`], with the webhook options (on the installed address and certificates)
/// changed by `configure`.
fn manager_with(
    ns: &TestNamespace,
    installed: &InstalledWebhooks,
    configure: impl FnOnce(rudder::webhook::Options) -> rudder::webhook::Options,
) -> Arc<Manager> {
    let namespace = ns.name().to_owned();
    Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(Some(SocketAddr::from(([127, 0, 0, 1], 0))))
            .metrics_address(None)
            .cache(move |c| c.default_namespace(namespace))
            .webhook_options(configure(
                rudder::webhook::Options::new()
                    .bind_address(installed.addr())
                    .cert_dir(installed.cert_dir()),
            ))
            .build()
            .unwrap(),
    )
}

type Running = tokio::task::JoinHandle<Result<(), rudder::manager::Error>>;

async fn start(m: &Arc<Manager>) -> (CancellationToken, Running) {
    let (stop, running) = support::start(m);
    // Ready includes the webhook check: a TLS handshake with the server itself.
    eventually("the manager is ready", WAIT, async || {
        let addr = m.health_address()?;
        let (status, _) = get(addr, "/readyz?verbose").await;
        (status == 200).then_some(())
    })
    .await;
    (stop, running)
}

fn configmap(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some([("value".to_owned(), "good".to_owned())].into()),
        ..ConfigMap::default()
    }
}

/// The message of an API error.
fn message(error: kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn admission_webhooks_default_validate_and_warn() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("webhook-admission").await.unwrap();
    let installed = ns
        .install_webhooks(options(declare_admission, &ns))
        .await
        .unwrap();
    let m = manager(&ns, &installed);
    declare_admission(&m);
    let (stop, running) = start(&m).await;
    assert_eq!(m.webhook_address().await, Some(installed.addr()));
    let (_, verbose) = get(m.health_address().unwrap(), "/readyz?verbose").await;
    assert!(verbose.contains("[+]webhook ok"), "{verbose}");

    let cms: Api<ConfigMap> = ns.api();
    let pp = PostParams::default();
    let created = cms.create(&pp, &configmap("plain")).await.unwrap();
    assert_eq!(
        created.labels().get("defaulted").map(String::as_str),
        Some("yes"),
        "the defaulter's patch was applied"
    );
    let denied = cms.create(&pp, &configmap("forbidden")).await.unwrap_err();
    assert!(
        message(denied).contains(DENIAL),
        "the validator's message reaches the client"
    );
    let patch = Patch::Merge(serde_json::json!({ "data": { "value": "bad" } }));
    let denied = cms
        .patch("plain", &PatchParams::default(), &patch)
        .await
        .unwrap_err();
    assert!(message(denied).contains("value may not be bad"));

    // Warnings come back as Warning headers.
    let body = serde_json::to_vec(&configmap("warn-me")).unwrap();
    let request = http::Request::post(format!("/api/v1/namespaces/{}/configmaps", ns.name()))
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let response = ns.client().send(request.map(Into::into)).await.unwrap();
    assert_eq!(response.status(), 201);
    let warnings: Vec<_> = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("warn-me is a questionable name")),
        "{warnings:?}"
    );
    stop.cancel();
    running.await.unwrap().unwrap();

    // failurePolicy Fail: with the server stopped, creates are refused...
    let refused = cms.create(&pp, &configmap("while-down")).await.unwrap_err();
    assert!(matches!(refused, kube::Error::Api(_)), "{refused}");
    // ...and pass again once a server is back.
    let again = manager(&ns, &installed);
    declare_admission(&again);
    let (stop, running) = start(&again).await;
    let created = cms.create(&pp, &configmap("while-up")).await.unwrap();
    assert_eq!(
        created.labels().get("defaulted").map(String::as_str),
        Some("yes")
    );
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// With HTTP/2 offered, the real API server calls the webhook and the answers work. Which
/// protocol it takes depends on its release: 1.20's webhook client asked only for `http/1.1`
/// (kubernetes#75791); the releases tested now (1.33, 1.37) take `h2` when it is offered.
#[cfg(feature = "webhook-http2")]
#[tokio::test]
async fn a_webhook_offering_http2_is_called_by_the_api_server_over_the_protocol_its_release_takes()
{
    let metrics = rudder::manager::metrics::prometheus().unwrap();
    let requests_over = |protocol: &str| {
        let series =
            format!("rudder_webhook_requests_by_protocol_total{{protocol=\"{protocol}\"}} ");
        metrics
            .render()
            .lines()
            .find_map(|line| line.strip_prefix(series.as_str())?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let (http1_before, http2_before) = (requests_over("HTTP/1.1"), requests_over("HTTP/2"));
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("webhook-http2").await.unwrap();
    let installed = ns
        .install_webhooks(options(declare_admission, &ns))
        .await
        .unwrap();
    let m = manager_with(&ns, &installed, |options| options.http2(true));
    declare_admission(&m);
    let (stop, running) = start(&m).await;
    let cms: Api<ConfigMap> = ns.api();
    let created = cms
        .create(&PostParams::default(), &configmap("offered-http2"))
        .await
        .unwrap();
    assert_eq!(
        created.labels().get("defaulted").map(String::as_str),
        Some("yes"),
        "the defaulter's patch was applied"
    );
    let denied = cms
        .create(&PostParams::default(), &configmap("forbidden"))
        .await
        .unwrap_err();
    assert!(message(denied).contains(DENIAL));
    // Two creates, each through the mutating and the validating webhook (other tests in
    // this binary use HTTP/1.1 too, so only a lower bound holds there).
    let version = env.version();
    let (http1, http2) = (
        requests_over("HTTP/1.1") - http1_before,
        requests_over("HTTP/2") - http2_before,
    );
    if (version.major, version.minor) >= (1, 33) {
        assert!(
            http2 >= 4.0,
            "{version}'s calls came over HTTP/2:\n{}",
            metrics.render()
        );
    } else if (version.major, version.minor) <= (1, 20) {
        assert!(
            http1 >= 4.0 && http2 == 0.0,
            "{version}'s calls came over HTTP/1.1 only:\n{}",
            metrics.render()
        );
    } else {
        // Releases between were not measured: either protocol, but every call counted.
        assert!(http1 + http2 >= 4.0, "{}", metrics.render());
    }
    stop.cancel();
    running.await.unwrap().unwrap();
}

fn declare_conversion(manager: &Manager) {
    rudder::new_webhook(manager)
        .for_::<v2::Gizmo>()
        .conversion(
            KindConversion::<v2::Gizmo>::hub().spoke::<v1::Gizmo>(),
            &gizmo::crd(),
        )
        .complete()
        .unwrap();
}

struct Recorder(mpsc::UnboundedSender<Request>);

impl Reconciler for Recorder {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let _ = self.0.send(request);
        Ok(Action::done())
    }
}

/// A CRD in two versions with a field renamed between them: objects created in either read
/// back in the other, listed and watched; a failed conversion is an API error; a controller
/// watching the spoke version starts although its cache lists through the webhook (the
/// server starts before the cache is waited for).
#[tokio::test]
async fn conversion_between_versions_and_the_start_order() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("webhook-conversion").await.unwrap();
    let installed = ns
        .install_webhooks(options(declare_conversion, &ns))
        .await
        .unwrap();
    let m = manager(&ns, &installed);
    declare_conversion(&m);
    let (tx, mut seen) = mpsc::unbounded_channel();
    rudder::new_controller(&m)
        .for_::<v1::Gizmo>()
        .named("gizmo-v1")
        .complete(Recorder(tx))
        .await
        .unwrap();
    let (stop, running) = start(&m).await;

    let old: Api<v1::Gizmo> = ns.api();
    let new: Api<v2::Gizmo> = ns.api();
    let pp = PostParams::default();
    old.create(&pp, &v1::Gizmo::new("small", v1::GizmoSpec { size: 3 }))
        .await
        .unwrap();
    new.create(&pp, &v2::Gizmo::new("long", v2::GizmoSpec { length: 9 }))
        .await
        .unwrap();
    assert_eq!(new.get("small").await.unwrap().spec.length, 3);
    assert_eq!(old.get("long").await.unwrap().spec.size, 9);
    let listed: Vec<(String, i64)> = old
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|g| (g.name_any(), g.spec.size))
        .collect();
    assert_eq!(listed, [("long".to_owned(), 9), ("small".to_owned(), 3)]);

    // The controller on v1 (its informer lists and watches through the conversion).
    let mut reconciled = Vec::new();
    while reconciled.len() < 2 {
        let request = tokio::time::timeout(WAIT, seen.recv())
            .await
            .unwrap()
            .unwrap();
        if !reconciled.contains(&request.name().to_owned()) {
            reconciled.push(request.name().to_owned());
        }
    }
    reconciled.sort();
    assert_eq!(reconciled, ["long", "small"]);

    let failed = old
        .create(&pp, &v1::Gizmo::new("negative", v1::GizmoSpec { size: -1 }))
        .await
        .unwrap_err();
    assert!(
        message(failed).contains("a gizmo cannot have a negative size"),
        "the conversion's message reaches the client"
    );
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// A certificate directory laid out as the kubelet lays out a Secret volume: `tls.crt` and
/// `tls.key` link into `..data`, a link to the current generation, swapped by one rename.
struct SecretVolume {
    dir: std::path::PathBuf,
    generation: u32,
}

impl SecretVolume {
    fn new(cert: &str, key: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rudder-reload-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut volume = Self { dir, generation: 0 };
        volume.write(cert, key);
        std::os::unix::fs::symlink("..data/tls.crt", volume.dir.join("tls.crt")).unwrap();
        std::os::unix::fs::symlink("..data/tls.key", volume.dir.join("tls.key")).unwrap();
        volume
    }

    fn write(&mut self, cert: &str, key: &str) {
        self.generation += 1;
        let name = format!("..gen{}", self.generation);
        std::fs::create_dir(self.dir.join(&name)).unwrap();
        std::fs::write(self.dir.join(&name).join("tls.crt"), cert).unwrap();
        std::fs::write(self.dir.join(&name).join("tls.key"), key).unwrap();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&name, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
    }
}

impl Drop for SecretVolume {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The certificate (DER) the server at `addr` presents, verified against `ca_pem`.
async fn served_certificate(addr: SocketAddr, ca_pem: &str) -> Vec<u8> {
    use rustls::pki_types::ServerName;
    let config = rudder_envtest::tls::client_config_pem(ca_pem).unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// The serving pair is replaced on disk (a Secret volume's symlink swap) while the API server
/// keeps calling the webhook: no call fails, and the new certificate is served within the
/// poll period.
#[tokio::test]
async fn a_certificate_swapped_on_disk_is_served_without_a_failed_call() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("webhook-reload").await.unwrap();
    let installed = ns
        .install_webhooks(options(declare_admission, &ns))
        .await
        .unwrap();
    let mut volume = SecretVolume::new(installed.cert_pem(), installed.key_pem());
    let poll = Duration::from_millis(200);
    let m = manager_with(&ns, &installed, |options| {
        options.cert_dir(&volume.dir).cert_poll_period(poll)
    });
    declare_admission(&m);
    let (stop, running) = start(&m).await;
    assert_eq!(
        served_certificate(installed.addr(), installed.ca_pem()).await,
        der(installed.cert_pem())
    );

    // The API server calls the webhook for every create, on and on.
    let calling = CancellationToken::new();
    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let caller = tokio::spawn({
        let (cms, calling, calls) = (ns.api::<ConfigMap>(), calling.clone(), Arc::clone(&calls));
        async move {
            let (mut ok, mut failed) = (0u32, Vec::new());
            while !calling.is_cancelled() {
                match cms
                    .create(&PostParams::default(), &configmap(&format!("c{ok}")))
                    .await
                {
                    Ok(cm) if cm.labels().get("defaulted").is_some() => {
                        ok += 1;
                        calls.store(ok, std::sync::atomic::Ordering::SeqCst);
                    }
                    Ok(cm) => failed.push(format!("{} was not defaulted", cm.name_any())),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        }
    });
    let (new_cert, new_key) = installed.issue_serving_pair().unwrap();
    volume.write(&new_cert, &new_key);
    let swapped = tokio::time::Instant::now();
    eventually("the new certificate served", WAIT, async || {
        (served_certificate(installed.addr(), installed.ca_pem()).await == der(&new_cert))
            .then_some(())
    })
    .await;
    let took = swapped.elapsed();
    // A few more calls on the new certificate.
    let calls_then = calls.load(std::sync::atomic::Ordering::SeqCst);
    eventually("calls on the new certificate", WAIT, async || {
        (calls.load(std::sync::atomic::Ordering::SeqCst) > calls_then + 3).then_some(())
    })
    .await;
    calling.cancel();
    let (ok, failed) = caller.await.unwrap();
    assert!(
        failed.is_empty(),
        "calls failed during the swap: {failed:?}"
    );
    assert!(ok > 5, "the API server called the webhook {ok} times");
    assert!(
        took < 5 * poll,
        "the new certificate was served {took:?} after the swap (poll period {poll:?})"
    );
    stop.cancel();
    running.await.unwrap().unwrap();
}
