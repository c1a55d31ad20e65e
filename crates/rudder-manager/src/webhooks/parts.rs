//! The TLS parts themselves: what the builder collects ([`Declared`]) and what a built
//! manager holds ([`Parts`]), with their build, start and stop.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rudder_core::sync::LockExt;
use rudder_webhook::manifest::Registration;
use rudder_webhook::{RunningWebhookServer, WebhookServer};

use crate::authz::SecureMetrics;
use crate::health::{HealthChecks, Probe, check};
use crate::manager::{BuildError, Error};
use crate::server::{Routes, Served, serve_secure};

/// What the builder collects for the TLS parts.
#[derive(Default)]
pub(crate) struct Declared {
    pub(super) secure_metrics: Option<SecureMetrics>,
    pub(super) webhook: rudder_webhook::Options,
    pub(super) certificates: Option<rudder_certs::SelfSigned>,
}

/// The webhook server once it serves, shared with its readiness check.
type RunningWebhook = Arc<tokio::sync::RwLock<Option<RunningWebhookServer>>>;

/// The TLS parts of a built manager.
pub(crate) struct Parts {
    pub(super) certificates: Option<rudder_certs::SelfSigned>,
    pub(super) running_certificates: Mutex<Option<rudder_certs::RunningCertificates>>,
    pub(super) secure_metrics: Option<SecureMetrics>,
    pub(super) webhook: WebhookServer,
    pub(super) running_webhook: RunningWebhook,
    pub(super) registrations: Mutex<Vec<Registration>>,
}

impl Declared {
    /// Resolves what was declared (secure metrics from the self-signed source take its
    /// store) and adds the `webhook` readiness check to `health`. Starts nothing.
    pub(crate) fn build(mut self, health: &HealthChecks) -> Result<Parts, BuildError> {
        if let Some(secure) = &mut self.secure_metrics
            && !secure.resolve(
                self.certificates
                    .as_ref()
                    .map(rudder_certs::SelfSigned::store),
            )
        {
            return Err(BuildError::SecureMetricsWithoutSelfSigned);
        }
        let webhook = WebhookServer::new(match &self.certificates {
            Some(certificates) => self.webhook.certificate_store(certificates.store().clone()),
            None => self.webhook,
        });
        let running_webhook: RunningWebhook = Arc::default();
        let probe = Arc::clone(&running_webhook);
        let registered = webhook.clone();
        health.add(
            Probe::Readiness,
            "webhook",
            check(move || {
                let (probe, registered) = (Arc::clone(&probe), registered.clone());
                async move {
                    if registered.is_empty() {
                        return Ok(());
                    }
                    match &*probe.read().await {
                        Some(running) => running.check_ready().await,
                        None => Err("the webhook server is not serving".to_owned()),
                    }
                }
            }),
        );
        Ok(Parts {
            certificates: self.certificates,
            running_certificates: Mutex::default(),
            secure_metrics: self.secure_metrics,
            webhook,
            running_webhook,
            registrations: Mutex::default(),
        })
    }
}

impl Parts {
    /// Whether a conversion webhook is registered, for the cache-sync readiness check
    /// (called at each check: webhooks may be registered after the build).
    pub(crate) fn converter(&self) -> impl Fn() -> bool + Send + Sync + 'static {
        let webhook = self.webhook.clone();
        move || webhook.has_conversion()
    }

    /// Serves the metrics routes over HTTPS if secure metrics are on; `None` if they are
    /// not (the manager then serves plain HTTP).
    pub(crate) async fn serve_metrics(
        &self,
        addr: SocketAddr,
        routes: Routes,
        client: &kube::Client,
    ) -> Option<Result<Served, Error>> {
        let secure = self.secure_metrics.as_ref()?;
        Some(
            serve_secure(addr, routes, secure, client.clone())
                .await
                .map_err(|source| Error::SecureMetrics { addr, source }),
        )
    }

    /// Loads the self-signed certificates (if any) and starts the webhook server (if a
    /// webhook is registered), in that order.
    pub(crate) async fn start(&self, client: &kube::Client) -> Result<(), Error> {
        if let Some(certificates) = &self.certificates {
            let running = certificates
                .start(client.clone())
                .await
                .map_err(Error::Certificates)?;
            *self.running_certificates.lock_unpoisoned() = Some(running);
        }
        if !self.webhook.is_empty() {
            let running = self.webhook.start().await.map_err(Error::Webhook)?;
            tracing::info!(addr = %running.local_addr(), paths = ?self.webhook.paths(), "serving webhooks");
            *self.running_webhook.write().await = Some(running);
        }
        Ok(())
    }

    /// Stops the webhook server, then the certificates' tasks, by `deadline`.
    pub(crate) async fn stop(&self, deadline: Option<tokio::time::Instant>) {
        if let Some(running) = self.running_webhook.write().await.take() {
            running.stop(deadline).await;
        }
        let certificates = self.running_certificates.lock_unpoisoned().take();
        if let Some(running) = certificates {
            running.stop(deadline).await;
        }
    }

    /// Whether `/metrics` is served over HTTPS.
    pub(crate) fn has_secure_metrics(&self) -> bool {
        self.secure_metrics.is_some()
    }

    /// The self-signed certificates' configuration, for the manager's own RBAC.
    pub(crate) fn certificates_config(&self) -> Option<&rudder_certs::SelfSignedConfig> {
        self.certificates
            .as_ref()
            .map(rudder_certs::SelfSigned::config)
    }
}
