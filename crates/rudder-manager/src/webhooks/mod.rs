//! The manager's server-side TLS, behind the `webhook` feature: the webhook server
//! ([`rudder_webhook`]), the self-signed certificates ([`rudder_certs`]) and secure metrics.
//! Without the feature none of it (nor rustls) is compiled.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use rudder_server::ServerHandle;
use rudder_webhook::manifest::Registration;
use rudder_webhook::{RunningWebhookServer, WebhookServer};

use crate::authz::SecureMetrics;
use crate::health::{HealthChecks, Probe, check};
use crate::manager::{BuildError, Error, Manager, ManagerBuilder};
use crate::server::{Routes, serve_secure};

/// What the builder collects for the TLS parts.
#[derive(Default)]
pub(crate) struct Declared {
    secure_metrics: Option<SecureMetrics>,
    webhook: rudder_webhook::Options,
    certificates: Option<rudder_certs::SelfSigned>,
}

/// The webhook server once it serves, shared with its readiness check.
type RunningWebhook = Arc<tokio::sync::RwLock<Option<RunningWebhookServer>>>;

/// The TLS parts of a built manager.
pub(crate) struct Parts {
    certificates: Option<rudder_certs::SelfSigned>,
    running_certificates: Mutex<Option<rudder_certs::RunningCertificates>>,
    secure_metrics: Option<SecureMetrics>,
    webhook: WebhookServer,
    running_webhook: RunningWebhook,
    registrations: Mutex<Vec<Registration>>,
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
    ) -> Option<Result<ServerHandle, Error>> {
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
            *self
                .running_certificates
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(running);
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
        let certificates = self
            .running_certificates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
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

impl ManagerBuilder {
    /// Serves `/metrics` and the extra handlers over HTTPS, only to callers whose bearer
    /// token the API server authenticates and authorizes for the request's path (`get` on
    /// the non-resource URL `/metrics`), with cached decisions: see [`SecureMetrics`], which
    /// also lists the RBAC the operator then needs (create TokenReviews and
    /// SubjectAccessReviews). The probes stay plain HTTP. (Feature `webhook`.)
    ///
    /// ```no_run
    /// # fn demo(client: kube::Client) -> Result<(), rudder_manager::BuildError> {
    /// use rudder_manager::SecureMetrics;
    ///
    /// let manager = rudder_manager::Manager::builder(client)
    ///     .secure_metrics(SecureMetrics::files("/tmp/k8s-metrics-server/metrics-certs"))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn secure_metrics(mut self, secure: SecureMetrics) -> Self {
        self.tls.secure_metrics = Some(secure);
        self
    }

    /// How the webhook server serves (default [`rudder_webhook::Options::new`]: port 9443,
    /// certificates from [`rudder_webhook::DEFAULT_CERT_DIR`], reloaded when they change).
    /// The server starts only if a webhook is registered on
    /// [`Manager::webhook_server`]. (Feature `webhook`.)
    pub fn webhook_options(mut self, options: rudder_webhook::Options) -> Self {
        self.tls.webhook = options;
        self
    }

    /// Serves webhooks with certificates the operator makes itself ([`rudder_certs`]): a
    /// CA and a serving certificate in one Secret shared by every replica (created if
    /// missing), renewed before they expire and swapped in without a restart, and the CA
    /// injected into the configured webhook configurations and CRDs. It replaces the
    /// certificate source of [`webhook_options`](Self::webhook_options) (whatever order
    /// the two are called in). (Feature `webhook`.)
    ///
    /// `start` loads the certificate before it starts the webhook server (failing with
    /// [`Error::Certificates`] if it cannot), and runs the Secret's watch, the renewal
    /// checks and the injection on every replica (not only the leader) until the stop.
    pub fn self_signed_webhook_certificates(
        mut self,
        config: rudder_certs::SelfSignedConfig,
    ) -> Self {
        self.tls.certificates = Some(rudder_certs::SelfSigned::new(config));
        self
    }
}

impl Manager {
    /// The webhook server: register admission and conversion webhooks on it (the `rudder`
    /// facade's `new_webhook` builder does). It starts with the manager, right after the
    /// probe and metrics servers and before the cache syncs, on every replica (not only the
    /// leader), and only if a webhook is registered; readiness then includes a `webhook`
    /// check (a TLS handshake with itself), and with a conversion webhook readiness no
    /// longer waits on the cache (see [`Manager::start`]). (Feature `webhook`.)
    pub fn webhook_server(&self) -> &WebhookServer {
        &self.tls.webhook
    }

    /// Records what a webhook registered on [`webhook_server`](Self::webhook_server) needs in
    /// the cluster (its resource, operations and path), for rendering the webhook
    /// configurations and CRD conversion stanzas ([`rudder_webhook::manifest`]). The
    /// `rudder` facade's webhook builder records every webhook it registers. (Feature
    /// `webhook`.)
    pub fn record_webhook(&self, registration: Registration) {
        self.tls
            .registrations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(registration);
    }

    /// What [`record_webhook`](Self::record_webhook) recorded, in order. (Feature
    /// `webhook`.)
    pub fn webhook_registrations(&self) -> Vec<Registration> {
        self.tls
            .registrations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The self-signed webhook certificates, if
    /// [`ManagerBuilder::self_signed_webhook_certificates`] turned them on: the store
    /// served from and the CA bundle clients trust. (Feature `webhook`.)
    pub fn webhook_certificates(&self) -> Option<&rudder_certs::SelfSigned> {
        self.tls.certificates.as_ref()
    }

    /// Where the webhook server listens, once it serves. (Feature `webhook`.)
    pub async fn webhook_address(&self) -> Option<SocketAddr> {
        self.tls
            .running_webhook
            .read()
            .await
            .as_ref()
            .map(RunningWebhookServer::local_addr)
    }
}
