//! [`OtlpError`]: why an OTLP exporter could not be built or shut down.

#[cfg(doc)]
use super::{Otlp, OtlpExporter};

/// Why an [`OtlpExporter`] could not be built or shut down.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtlpError {
    /// A variable has a value this exporter does not take (the message names both).
    /// Retrying does not help until the value is changed.
    #[error("{variable}={value:?}: {reason}")]
    Variable {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        reason: &'static str,
    },
    /// [`Otlp::build`] was called outside a Tokio runtime, which the exporter's connections
    /// need.
    #[error("the OTLP exporter must be built inside a Tokio runtime")]
    NoRuntime,
    /// The HTTP client's TLS could not be set up (the system's roots could not be read).
    #[error("cannot set up TLS for the OTLP exporter")]
    Tls(#[source] std::io::Error),
    /// The OTLP exporter rejected its configuration (an endpoint that is not a URL, a
    /// header that does not parse).
    #[error("cannot build the OTLP exporter")]
    Build(#[source] opentelemetry_otlp::ExporterBuildError),
    /// The exporter did not shut down cleanly: spans may have been lost (the collector did
    /// not answer within the deadline, or refused them).
    #[error("the OTLP exporter did not shut down cleanly")]
    Shutdown(#[source] opentelemetry_sdk::error::OTelSdkError),
}
