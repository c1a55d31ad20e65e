//! OpenTelemetry export (`otlp` feature): the manager's spans sent over OTLP to a collector.
//!
//! [`Otlp`] is the configuration: the standard `OTEL_*` variables, read when it is built,
//! under anything set on it. [`Otlp::build`] makes an [`OtlpExporter`] (or nothing, when no
//! endpoint is configured: no exporter, no thread, no connection); [`OtlpExporter::layer`]
//! is the `tracing` layer that turns spans into OpenTelemetry spans for it.
//!
//! The manager does this itself: at start, unless it was handed an exporter
//! ([`ManagerBuilder::otlp_exporter`](crate::ManagerBuilder::otlp_exporter)), it builds one
//! from [`ManagerBuilder::otlp`](crate::ManagerBuilder::otlp) (by default the variables
//! alone) and, if an endpoint is configured, installs a subscriber with its layer as the
//! process's global default. A program that installs its own subscriber (a `fmt` layer for
//! its logs, say) puts the layer under it and hands the exporter to the manager, which
//! flushes and shuts it down when it stops:
//!
//! ```no_run
//! use rudder_manager::Manager;
//! use rudder_manager::otlp::Otlp;
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let exporter = Otlp::new()
//!     .service_name("my-operator")
//!     .cluster_name("prod-eu-1")
//!     .build()?;
//! let layer = exporter.as_ref().map(|exporter| exporter.layer());
//! tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))?;
//! let mut builder = Manager::builder(client).name("my-operator");
//! if let Some(exporter) = exporter {
//!     builder = builder.otlp_exporter(exporter);
//! }
//! builder.build()?.start_until_signal().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Variables
//!
//! As the OpenTelemetry SDK specification has them:
//!
//! - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as it is) or `OTEL_EXPORTER_OTLP_ENDPOINT`
//!   (a base: `/v1/traces` is appended for HTTP). Neither set: nothing is exported.
//! - `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf`
//!   (the default) or `grpc`. `http/json` is not supported and is an error.
//! - `OTEL_EXPORTER_OTLP_(TRACES_)HEADERS`, `OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT`,
//!   `OTEL_EXPORTER_OTLP_(TRACES_)COMPRESSION` (none; gzip and zstd are not built in).
//! - `OTEL_SERVICE_NAME`, then `service.name` in `OTEL_RESOURCE_ATTRIBUTES`, then
//!   [`Otlp::service_name`] (the manager's name, when the manager builds it).
//! - `OTEL_RESOURCE_ATTRIBUTES`: more resource attributes (`k8s.cluster.name` among them,
//!   unless [`Otlp::cluster_name`] sets it).
//! - `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`: the sampler (default
//!   `parentbased_always_on`).
//! - `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`,
//!   `OTEL_BSP_EXPORT_TIMEOUT`: the batch processor.
//! - `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`: nothing is exported.
//!
//! HTTPS endpoints are verified against the system's roots (rustls on `ring`, both
//! protocols).
//!
//! # What is exported
//!
//! Spans at `info` and above, and the API client's request spans (kube's `HTTP` spans, at
//! `debug` under `kube_client`): the controllers' `reconcile` spans (with the controller,
//! the request, the reconcile ID, the triggers and causes, the queue wait, and the fleet
//! member as `cluster`), the webhook server's `webhook` spans (a child of the API server's
//! span when it sends a `traceparent`), and whatever the reconcilers open inside them.
//! Events inside a span become its span events.
//!
//! # Threads and shutdown
//!
//! The SDK's batch processor runs on a thread of its own, which the exporter owns; an HTTP
//! export runs on the Tokio runtime the exporter was built on (as a task awaited by that
//! thread), a gRPC export on the channel the runtime drives. [`OtlpExporter::shutdown`]
//! exports what is queued and joins the thread, within the deadline it is given: the manager
//! calls it last when it stops, with its stop's deadline.

mod error;
mod http_client;
mod managed;

pub use error::OtlpError;
pub(crate) use managed::Managed;

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

/// The resource attribute naming the cluster, from OpenTelemetry's Kubernetes conventions.
pub const CLUSTER_NAME_ATTRIBUTE: &str = "k8s.cluster.name";

/// The instrumentation scope of the spans the layer exports.
const SCOPE: &str = "rudder";

/// The wire protocol of the export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// Protobuf messages POSTed over HTTP (`http/protobuf`): OTLP's default, port 4318.
    HttpProtobuf,
    /// gRPC (`grpc`), port 4317.
    Grpc,
}

/// How to export: the `OTEL_*` variables, read by [`Otlp::build`], under what is set here.
#[derive(Clone, Debug, Default)]
pub struct Otlp {
    endpoint: Option<String>,
    protocol: Option<Protocol>,
    service_name: Option<String>,
    cluster_name: Option<String>,
}

impl Otlp {
    /// The configuration the variables give, nothing set in code.
    pub fn new() -> Self {
        Self::default()
    }

    /// The URL spans are sent to, used as it is (for HTTP, the full path: usually
    /// `.../v1/traces`): over `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` and
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// The protocol, over `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` and
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = Some(protocol);
        self
    }

    /// The service name when the variables give none (`OTEL_SERVICE_NAME` and `service.name`
    /// in `OTEL_RESOURCE_ATTRIBUTES` win, as the specification has it). The manager sets its
    /// own name here.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// The cluster's name, as the resource attribute `k8s.cluster.name` (over the same
    /// attribute in `OTEL_RESOURCE_ATTRIBUTES`).
    pub fn cluster_name(mut self, name: impl Into<String>) -> Self {
        self.cluster_name = Some(name.into());
        self
    }

    /// Whether an endpoint is configured, here or in the variables, and export is not turned
    /// off (`OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`).
    pub fn is_configured(&self) -> bool {
        !disabled() && (self.endpoint.is_some() || env_endpoint().is_some())
    }

    /// The exporter, with its batch processor's thread started; `None` when
    /// [not configured](Self::is_configured). Call it inside the Tokio runtime the exports
    /// are to run on.
    pub fn build(self) -> Result<Option<OtlpExporter>, OtlpError> {
        if !self.is_configured() {
            return Ok(None);
        }
        exporter_kind()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| OtlpError::NoRuntime)?;
        let protocol = match self.protocol {
            Some(protocol) => protocol,
            None => env_protocol()?,
        };
        let exporter = match protocol {
            Protocol::HttpProtobuf => {
                let client = http_client::OnRuntime::new(runtime, http_timeout())?;
                let builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_http_client(client);
                match self.endpoint {
                    Some(endpoint) => builder.with_endpoint(endpoint).build(),
                    None => builder.build(),
                }
            }
            Protocol::Grpc => {
                let builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_protocol(opentelemetry_otlp::Protocol::Grpc);
                match self.endpoint {
                    Some(endpoint) => builder.with_endpoint(endpoint).build(),
                    None => builder.build(),
                }
            }
        }
        .map_err(OtlpError::Build)?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource(self.service_name, self.cluster_name))
            .build();
        let tracer = provider.tracer(SCOPE);
        Ok(Some(OtlpExporter { provider, tracer }))
    }
}

/// An OTLP exporter running: its tracer provider (which owns the batch processor's thread)
/// and the tracer the layer uses. Shut it down with [`OtlpExporter::shutdown`] (the manager
/// does, for the exporter it was handed or built).
#[derive(Debug)]
pub struct OtlpExporter {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl OtlpExporter {
    /// The `tracing` layer that exports spans through this exporter: spans at `info` and
    /// above, and the API client's request spans (`debug` under `kube_client`). Put it under
    /// any subscriber that looks spans up (`tracing_subscriber::registry()` and what is
    /// built on it).
    pub fn layer<S>(&self) -> impl Layer<S>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        let targets = Targets::new()
            .with_default(LevelFilter::INFO)
            .with_target("kube_client", LevelFilter::DEBUG)
            // The exporter's own connections must not make spans to export.
            .with_target("h2", LevelFilter::OFF)
            .with_target("hyper", LevelFilter::OFF)
            .with_target("hyper_util", LevelFilter::OFF)
            .with_target("tonic", LevelFilter::OFF)
            .with_target("tower", LevelFilter::OFF)
            .with_target("opentelemetry", LevelFilter::OFF)
            .with_target("opentelemetry_sdk", LevelFilter::OFF)
            .with_target("opentelemetry_otlp", LevelFilter::OFF)
            .with_target("opentelemetry_http", LevelFilter::OFF);
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_filter(targets)
    }

    /// Installs a subscriber made of this exporter's layer alone as the process's global
    /// default. `false` (and nothing changed) when one is installed already: then put
    /// [`layer`](Self::layer) under that one.
    pub fn install_global(&self) -> bool {
        use tracing_subscriber::layer::SubscriberExt;
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(self.layer()))
            .is_ok()
    }

    /// Exports what is queued and stops the batch processor's thread, joining it, by
    /// `deadline` (`None`: the SDK's 5 s). Spans ended after this are dropped.
    pub async fn shutdown(self, deadline: Option<tokio::time::Instant>) -> Result<(), OtlpError> {
        let timeout = deadline.map_or(Duration::from_secs(5), |deadline| {
            deadline.saturating_duration_since(tokio::time::Instant::now())
        });
        let provider = self.provider;
        // Blocking (it joins the processor's thread, which may wait for an export that runs
        // on this runtime), so off the runtime's workers.
        #[allow(clippy::disallowed_methods)] // owned: joined on the next line
        let task = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(timeout));
        match task.await {
            Ok(result) => result.map_err(OtlpError::Shutdown),
            Err(error) => Err(OtlpError::Shutdown(
                opentelemetry_sdk::error::OTelSdkError::InternalFailure(error.to_string()),
            )),
        }
    }
}

/// The resource: the SDK's detectors (`OTEL_RESOURCE_ATTRIBUTES`, the SDK's own
/// attributes), the service name by the specification's precedence, the cluster.
fn resource(service_name: Option<String>, cluster_name: Option<String>) -> Resource {
    let mut resource = Resource::builder();
    if let Some(name) = non_empty_var("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name(name);
    } else if !resource_attributes_name_service()
        && let Some(name) = service_name
    {
        resource = resource.with_service_name(name);
    }
    if let Some(cluster) = cluster_name {
        resource = resource.with_attribute(KeyValue::new(CLUSTER_NAME_ATTRIBUTE, cluster));
    }
    resource.build()
}

/// Whether `OTEL_RESOURCE_ATTRIBUTES` names the service.
fn resource_attributes_name_service() -> bool {
    non_empty_var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
        attributes
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .any(|(key, value)| key.trim() == "service.name" && !value.trim().is_empty())
    })
}

fn non_empty_var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

fn env_endpoint() -> Option<String> {
    non_empty_var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| non_empty_var("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

fn disabled() -> bool {
    non_empty_var("OTEL_SDK_DISABLED").is_some_and(|value| value.eq_ignore_ascii_case("true"))
        || non_empty_var("OTEL_TRACES_EXPORTER")
            .is_some_and(|value| value.eq_ignore_ascii_case("none"))
}

/// `OTEL_TRACES_EXPORTER` must name OTLP (or be unset) for this exporter to run.
fn exporter_kind() -> Result<(), OtlpError> {
    match non_empty_var("OTEL_TRACES_EXPORTER") {
        None => Ok(()),
        Some(value) if value.eq_ignore_ascii_case("otlp") => Ok(()),
        Some(value) => Err(OtlpError::Variable {
            variable: "OTEL_TRACES_EXPORTER",
            value,
            reason: "only `otlp` (or `none`) is supported",
        }),
    }
}

fn env_protocol() -> Result<Protocol, OtlpError> {
    let (variable, value) = match non_empty_var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
        Some(value) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", value),
        None => match non_empty_var("OTEL_EXPORTER_OTLP_PROTOCOL") {
            Some(value) => ("OTEL_EXPORTER_OTLP_PROTOCOL", value),
            None => return Ok(Protocol::HttpProtobuf),
        },
    };
    parse_protocol(&value).ok_or(OtlpError::Variable {
        variable,
        value,
        reason: "expected `http/protobuf` or `grpc` (`http/json` is not supported)",
    })
}

fn parse_protocol(value: &str) -> Option<Protocol> {
    match value.to_ascii_lowercase().as_str() {
        "http/protobuf" => Some(Protocol::HttpProtobuf),
        "grpc" => Some(Protocol::Grpc),
        _ => None,
    }
}

/// The HTTP request's timeout: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, then
/// `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), then the specification's 10 s.
fn http_timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| non_empty_var(name)?.parse::<u64>().ok())
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_parse_as_the_specification_spells_them() {
        assert_eq!(
            parse_protocol("http/protobuf"),
            Some(Protocol::HttpProtobuf)
        );
        assert_eq!(parse_protocol("GRPC"), Some(Protocol::Grpc));
        assert_eq!(parse_protocol("http/json"), None);
        assert_eq!(parse_protocol("udp"), None);
    }

    #[test]
    fn without_an_endpoint_nothing_is_built() {
        // The test environment sets no OTEL_* variable (CI's does not either).
        if env_endpoint().is_some() {
            return;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        assert!(!Otlp::new().is_configured());
        assert!(Otlp::new().build().unwrap().is_none());
    }

    #[test]
    fn outside_a_runtime_building_is_an_error() {
        let built = Otlp::new().endpoint("http://127.0.0.1:1/v1/traces").build();
        assert!(matches!(built, Err(OtlpError::NoRuntime)), "{built:?}");
    }
}
