//! The manager's server-side TLS, behind the `webhook` feature: the webhook server
//! ([`rudder_webhook`]), the self-signed certificates ([`rudder_certs`]) and secure metrics.
//! Without the feature none of it (nor rustls) is compiled.
//!
//! This file holds the builder's and the manager's methods for them; `parts.rs` the parts
//! themselves, which the manager holds.

mod parts;

use std::net::SocketAddr;

use rudder_core::sync::LockExt;
use rudder_webhook::manifest::Registration;
use rudder_webhook::{RunningWebhookServer, WebhookServer};

pub(crate) use parts::{Declared, Parts};

use crate::authz::SecureMetrics;
#[cfg(doc)]
use crate::manager::Error;
use crate::manager::{Manager, ManagerBuilder};

#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
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

#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
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
        self.tls.registrations.lock_unpoisoned().push(registration);
    }

    /// What [`record_webhook`](Self::record_webhook) recorded, in order. (Feature
    /// `webhook`.)
    pub fn webhook_registrations(&self) -> Vec<Registration> {
        self.tls.registrations.lock_unpoisoned().clone()
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
