//! Admission (defaulting, validating) and conversion webhooks served over TLS, with
//! certificate hot reload and controller-runtime's paths, behaviours and metrics.
//!
//! Start with [`WebhookServer::new`] and [`Options`], register [`Webhook`]s by path (a
//! typed [`Defaulter`](admission::Defaulter) or [`Validator`](admission::Validator), or a
//! raw [`AdmissionHandler`](admission::AdmissionHandler)) and conversions
//! ([`KindConversion`]), then [`start`](WebhookServer::start) it and
//! [`stop`](RunningWebhookServer::stop) it with a deadline. The manager does all of this
//! for an operator; this crate does not depend on it.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::Pod;
//! use kube::core::DynamicObject;
//! use kube::core::admission::AdmissionRequest;
//! use rudder_webhook::admission::{Defaulter, Denial, FieldError, Validator, Warnings};
//! use rudder_webhook::{Options, Webhook, WebhookServer, mutate_path, validate_path};
//!
//! /// Labels every Pod with the team that owns it.
//! struct TeamLabel;
//!
//! impl Defaulter<Pod> for TeamLabel {
//!     async fn default(
//!         &self,
//!         pod: &mut Pod,
//!         _request: &AdmissionRequest<DynamicObject>,
//!     ) -> Result<Warnings, Denial> {
//!         let labels = pod.metadata.labels.get_or_insert_with(Default::default);
//!         labels.entry("team".to_owned()).or_insert_with(|| "platform".to_owned());
//!         Ok(Vec::new())
//!     }
//! }
//!
//! /// Refuses Pods without containers, and warns about `latest` images.
//! struct PodRules;
//!
//! impl Validator<Pod> for PodRules {
//!     async fn validate_create(
//!         &self,
//!         pod: &Pod,
//!         _request: &AdmissionRequest<DynamicObject>,
//!     ) -> Result<Warnings, Denial> {
//!         let containers = pod.spec.as_ref().map(|spec| spec.containers.as_slice()).unwrap_or_default();
//!         if containers.is_empty() {
//!             return Err(Denial::invalid([FieldError::required(
//!                 "spec.containers",
//!                 "a pod needs at least one container",
//!             )]));
//!         }
//!         let latest = containers
//!             .iter()
//!             .filter(|c| c.image.as_deref().is_some_and(|image| image.ends_with(":latest")))
//!             .map(|c| format!("container {} uses a :latest image", c.name))
//!             .collect();
//!         Ok(latest)
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = WebhookServer::new(Options::new().cert_dir("/etc/webhook/certs"));
//! server.register(mutate_path::<Pod>(), Webhook::defaulter(TeamLabel))?;
//! server.register(validate_path::<Pod>(), Webhook::validator(PodRules))?;
//!
//! let running = server.start().await?;
//! running.check_ready().await?;
//! // ... until the process is asked to stop: finish requests in flight for up to 10 s.
//! let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
//! running.stop(Some(deadline)).await;
//! # Ok(())
//! # }
//! ```
//!
//! # Server
//!
//! HTTPS with rustls (the `ring` provider), HTTP/1.1, on [`rudder_server`]: every wait a
//! client can cause is bounded (TLS handshake, request head, idle keep-alive, the number of
//! connections), bodies over 7 MiB are answered `413`, and a stop finishes requests in
//! flight until the caller's deadline. The default address is `0.0.0.0:9443`. A path
//! registered twice, or one not starting with `/`, is a [`RegisterError`], never a panic.
//! HTTP/2 is opt-in, as in controller-runtime since the HTTP/2 "rapid reset" attack
//! (CVE-2023-44487): with the `http2` feature, `Options::http2(true)` offers `h2` by ALPN
//! and serves it to clients that take it; others get HTTP/1.1. Which one the API server
//! takes depends on its release: 1.20's webhook client asked only for `http/1.1`
//! (kubernetes#75791), while 1.33 and 1.37 take `h2` when it is offered (the facade's
//! `tests/webhook.rs` checks this against each release CI runs). Either way the watchdog
//! bounds every connection the same.
//!
//! # Certificates
//!
//! By default `tls.crt` and `tls.key` are read from [`DEFAULT_CERT_DIR`] at start (a
//! missing or bad pair fails the start, naming the files) and read again every 10 s: a
//! Secret volume changes by a symlink swap, so the files' content is compared, not their
//! times. A new pair that does not parse, or whose key does not match, is logged and
//! counted (`certwatcher_read_certificate_errors_total`) and the old one kept. Any other
//! source fills a [`CertificateStore`] and hands it to
//! [`Options::certificate_store`]; every handshake reads the store's current certificate.
//!
//! # Admission
//!
//! Reviews are decoded with kube's types, the objects in them first as
//! [`DynamicObject`](kube::core::DynamicObject)s and only then, for a typed
//! [`Defaulter`](admission::Defaulter) or [`Validator`](admission::Validator), into the
//! handler's type, so an object that does not decode as that type still gets an answer with
//! its uid. As in controller-runtime: a body that is not JSON, or not
//! `application/json`, is HTTP 400; a review or object that does not decode is
//! `allowed: false` with code 400; a handler that panics is answered with code 500 and
//! counted; `dryRun` reaches the handler; the answer is in the review's own API version
//! (`admission.k8s.io/v1`, or `v1beta1`). A [`Defaulter`](admission::Defaulter)'s answer is
//! a JSON patch that never removes fields its type does not know. Answers are written as Go
//! writes them: the patch (`[]byte`) as a base64 string with `patchType: JSONPatch`, not as
//! the array of numbers kube-core's own `Serialize` would give.
//!
//! # Conversion
//!
//! Hub and spoke: each version of a kind implements [`Convertible`] to and from the hub
//! version; a [`KindConversion`] lists them, and registration checks that every served
//! version is covered. One `/convert` endpoint serves every kind; objects keep their
//! metadata and their order, and a failed conversion is a `Failure` result with the
//! message.
//!
//! # Tracing
//!
//! Every request to a registered path runs in an info span named `webhook` with the method,
//! the path (`url.path`) and the answer's status (`http.response.status_code`); with the
//! `otlp` feature, the trace context the API server sends (a W3C `traceparent` header, when
//! its own tracing is configured) is that span's parent, so an exported trace shows the
//! review under the API request that caused it.
//!
//! # Metrics
//!
//! controller-runtime's names, through the `metrics` crate: see [`metrics`]; and one of
//! Rudder's own, requests by HTTP version
//! ([`metrics::REQUESTS_BY_PROTOCOL_TOTAL`]).
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `http2` | no | HTTP/2 for clients that negotiate it by ALPN, when `Options::http2(true)` (rudder-server's `http2`) |
//! | `otlp` | no | a request's `webhook` span takes the W3C `traceparent` the API server sends as its parent (through tracing-opentelemetry; rudder-manager's `otlp` turns it on) |

// Which feature brings an item, in docs.rs' rendering (`--cfg docsrs`, on nightly).
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admission;
mod certificate;
mod certwatcher;
mod conversion;
mod error;
pub mod manifest;
pub mod metrics;
mod options;
mod paths;
mod server;
mod tls;
#[cfg(feature = "otlp")]
mod trace_context;
mod webhook;

pub use certificate::{CertificateError, CertificateStore, parse_pem_pair};
pub use certwatcher::{FileWatcher, LoadError};
pub use conversion::{ConversionError, Convertible, KindConversion};
pub use error::RegisterError;
pub use options::{
    CertificateSource, DEFAULT_BIND_ADDRESS, DEFAULT_CERT_DIR, DEFAULT_CERT_NAME,
    DEFAULT_CERT_POLL_PERIOD, DEFAULT_KEY_NAME, DEFAULT_MAX_BODY_SIZE, Options,
};
pub use paths::{CONVERT_PATH, mutate_path, path_for, validate_path};
pub use server::{RunningWebhookServer, StartError, WebhookServer};
pub use tls::Tls;
pub use webhook::Webhook;
