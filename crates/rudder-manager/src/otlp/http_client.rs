//! The HTTP client of the HTTP/protobuf export: hyper with rustls, each request run on the
//! Tokio runtime the exporter was built on.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{HttpClient, HttpError};

use super::error::OtlpError;

/// hyper's client (HTTPS with rustls on `ring` and the system's roots, or plain HTTP) whose
/// requests run as tasks on `runtime`: the SDK's batch processor calls it from a thread of
/// its own, outside any runtime, where hyper's connections cannot be driven.
#[derive(Debug, Clone)]
pub(super) struct OnRuntime {
    client: HyperClient<HttpsConnector<HttpConnector>>,
    runtime: tokio::runtime::Handle,
}

impl OnRuntime {
    pub(super) fn new(
        runtime: tokio::runtime::Handle,
        timeout: Duration,
    ) -> Result<Self, OtlpError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider)
            .map_err(OtlpError::Tls)?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            client: HyperClient::new(connector, timeout, None),
            runtime,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        #[allow(clippy::disallowed_methods)] // owned: awaited below, aborted if dropped
        let task = self
            .runtime
            .spawn(async move { client.send_bytes(request).await });
        let mut task = AbortOnDrop(task);
        match (&mut task.0).await {
            Ok(answer) => answer,
            Err(error) => Err(Box::new(error)),
        }
    }
}

/// A task aborted if the export waiting for it is dropped (its deadline passed).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
