//! What the webhook tests share: test certificates (a CA and serving pairs, written the
//! way a Secret volume lays them out), HTTPS clients trusting the test CA, a metrics
//! recorder, polling, and a handler that admits everything.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(
    dead_code,
    unreachable_pub,
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::needless_pass_by_value
)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rudder_envtest::poll::Poll;
use rudder_webhook::admission::{AdmissionHandler, allowed};
use rudder_webhook::{Options, RunningWebhookServer, Webhook, WebhookServer};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// How long a test waits for something that should happen promptly.
pub const WAIT: Duration = Duration::from_secs(10);

/// A test certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub der: CertificateDer<'static>,
}

/// A serving pair in PEM, with the certificate's DER to compare against.
#[derive(Clone)]
pub struct Pair {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self {
            der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving pair for `localhost` and `127.0.0.1`.
    pub fn serving_pair(&self) -> Pair {
        let params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }
}

/// A certificate directory laid out as the kubelet lays out a Secret volume:
/// `tls.crt -> ..data/tls.crt`, `..data -> ..<generation>/`, updated by swapping `..data`.
pub struct SecretDir {
    pub dir: PathBuf,
    generation: u32,
}

impl SecretDir {
    pub fn new(pair: &Pair) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "rudder-webhook-test-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut secret = Self { dir, generation: 0 };
        secret.write(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes());
        std::os::unix::fs::symlink("..data/tls.crt", secret.dir.join("tls.crt")).unwrap();
        std::os::unix::fs::symlink("..data/tls.key", secret.dir.join("tls.key")).unwrap();
        secret
    }

    /// Writes a new generation and swaps `..data` to it in one rename.
    pub fn write(&mut self, cert: &[u8], key: &[u8]) {
        self.generation += 1;
        let name = format!("..gen{}", self.generation);
        let generation = self.dir.join(&name);
        std::fs::create_dir(&generation).unwrap();
        std::fs::write(generation.join("tls.crt"), cert).unwrap();
        std::fs::write(generation.join("tls.key"), key).unwrap();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&name, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for SecretDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Options on a free loopback port with certificates from `dir`.
pub fn options(dir: &Path) -> Options {
    Options::new()
        .bind_address("127.0.0.1:0".parse().unwrap())
        .cert_dir(dir)
}

/// A started server with a fresh CA and pair in a Secret-like directory; `register`
/// registers its webhooks first.
pub struct Served {
    pub ca: Ca,
    pub pair: Pair,
    pub secret: SecretDir,
    pub server: WebhookServer,
    pub running: RunningWebhookServer,
}

pub async fn serve(
    configure: impl FnOnce(Options) -> Options,
    register: impl FnOnce(&WebhookServer),
) -> Served {
    let ca = Ca::new("test ca");
    let pair = ca.serving_pair();
    let secret = SecretDir::new(&pair);
    let server = WebhookServer::new(configure(options(secret.path())));
    register(&server);
    let running = server.start().await.unwrap();
    Served {
        ca,
        pair,
        secret,
        server,
        running,
    }
}

impl Served {
    /// A client connected to the server, trusting its CA.
    pub async fn client(&self) -> Client {
        Client::connect(self.running.local_addr(), &self.ca.der)
            .await
            .unwrap()
    }
}

/// An HTTPS/1.1 client on one connection, trusting one CA.
pub struct Client {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    pub peer_certificate: Option<CertificateDer<'static>>,
}

/// A client configuration trusting only `ca` (rudder-envtest's).
pub fn tls_config(ca: &CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
    rudder_envtest::tls::client_config([ca.clone()]).unwrap()
}

impl Client {
    pub async fn connect(addr: SocketAddr, ca: &CertificateDer<'static>) -> Result<Self, String> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|error| error.to_string())?;
        let tls = TlsConnector::from(tls_config(ca))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .map_err(|error| error.to_string())?;
        let peer_certificate = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first().cloned());
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|error| error.to_string())?;
        tokio::spawn(connection);
        Ok(Self {
            sender,
            peer_certificate,
        })
    }

    /// POSTs `body` as `content_type` to `path`.
    pub async fn post(
        &mut self,
        path: &str,
        content_type: &str,
        body: impl Into<Bytes>,
    ) -> Result<(StatusCode, Bytes), String> {
        self.sender
            .ready()
            .await
            .map_err(|error| error.to_string())?;
        let request = Request::post(path)
            .header(header::HOST, "localhost")
            .header(header::CONTENT_TYPE, content_type)
            .body(Full::new(body.into()))
            .unwrap();
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|error| error.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|error| error.to_string())?
            .to_bytes();
        Ok((status, body))
    }

    /// POSTs JSON and decodes the JSON answer (HTTP 200 expected).
    pub async fn review(&mut self, path: &str, review: &serde_json::Value) -> serde_json::Value {
        let (status, body) = self
            .post(
                path,
                "application/json",
                serde_json::to_vec(review).unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }
}

/// The process-wide Prometheus recorder, installed once per test binary.
pub fn metrics() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| PrometheusBuilder::new().install_recorder().unwrap())
}

/// A counter's value in the rendered metrics (0 when absent); `labels` is the exact label
/// set as rendered, e.g. `{webhook="/x",code="200"}`, or empty.
pub fn counter(name: &str, labels: &str) -> f64 {
    let labels = labels.strip_prefix('{').and_then(|l| l.strip_suffix('}'));
    rudder_envtest::metrics::value(&metrics().render(), name, labels.unwrap_or_default())
        .unwrap_or(0.0)
}

/// Polls `condition` every 10 ms until it holds, or panics after [`WAIT`].
pub async fn eventually(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    Poll::new(what, WAIT)
        .every(Duration::from_millis(10))
        .eventually(async || condition().await.then_some(()))
        .await;
}

/// Admits every review.
pub struct Allow;

impl AdmissionHandler for Allow {
    async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        allowed(&request)
    }
}

/// Registers [`Allow`] at `/allow`.
pub fn register_allow(server: &WebhookServer) {
    server
        .register("/allow", Webhook::admission(Allow))
        .unwrap();
}

/// An admission review (v1) for `object` with `operation`.
pub fn review(
    uid: &str,
    operation: &str,
    kind: (&str, &str, &str),
    object: Option<serde_json::Value>,
    old: Option<serde_json::Value>,
) -> serde_json::Value {
    let (group, version, kind) = kind;
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "name": "test",
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "tester"},
            "object": object,
            "oldObject": old,
            "dryRun": false,
        }
    })
}

/// The JSON Patch of an answering review, read as the API's schema says: `response.patch`
/// is `format: byte`, a base64 string (k8s-openapi's `ByteString`, generated from that
/// schema, decodes only that form), and `patchType` is `JSONPatch`. Panics otherwise.
pub fn wire_patch(answer: &serde_json::Value) -> json_patch::Patch {
    let response = &answer["response"];
    assert!(
        response["patch"].is_string(),
        "response.patch is not a string: {}",
        response["patch"]
    );
    assert_eq!(response["patchType"], "JSONPatch", "{response}");
    let bytes: k8s_openapi::ByteString = serde_json::from_value(response["patch"].clone())
        .unwrap_or_else(|error| panic!("response.patch is not base64: {error}"));
    serde_json::from_slice(&bytes.0)
        .unwrap_or_else(|error| panic!("response.patch is not a JSON Patch: {error}"))
}
