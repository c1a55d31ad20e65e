//! Installing admission and conversion webhooks that the API server calls on a loopback
//! address: certificates, rewriting the configurations, the probe that shows the API server
//! enforces them, and their removal.
//!
//! By concern: this file (what a test asks for and the [`InstalledWebhooks`] handle),
//! `install.rs` (the install), `rewrite.rs` (what the install changes in the configurations
//! and CRDs), `probe.rs` (the probe webhooks and the wait until they are enforced),
//! `cleanup.rs` (the removal, on drop or on request).

mod cleanup;
mod install;
mod probe;
mod rewrite;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

pub use probe::PROBE_LABEL;

use crate::certs::ServingPair;
use crate::error::{Error, Result};
#[cfg(doc)]
use crate::namespace::TestNamespace;
use cleanup::{Cleanup, remove_dir};
use probe::Probe;

/// What a test asks the API server to call: admission webhook configurations and CRDs whose
/// conversion should go to a webhook. Everything is rewritten to call the test's server on
/// loopback; see [`TestNamespace::install_webhooks`].
#[derive(Clone, Debug, Default)]
pub struct WebhookOptions {
    /// Mutating webhook configurations. Each webhook's `clientConfig` keeps only its path
    /// (from `service.path` or `url`; `/` if neither has one).
    pub mutating: Vec<MutatingWebhookConfiguration>,
    /// Validating webhook configurations, rewritten as the mutating ones are.
    pub validating: Vec<ValidatingWebhookConfiguration>,
    /// CRDs to install with webhook conversion at `/convert` (or the path their own
    /// conversion webhook names).
    pub conversion_crds: Vec<CustomResourceDefinition>,
}

/// Webhooks installed in the API server, and what the test's webhook server needs to serve
/// them: the address to bind, a serving certificate and key, and the CA the API server
/// trusts.
///
/// Dropping it (or [`uninstall`](Self::uninstall)) deletes the configurations, turns the
/// CRDs' conversion back to `None` and removes the certificate directory. Drop does this on a
/// thread of its own, so it works in any runtime (or none); it waits at most 10 s.
pub struct InstalledWebhooks {
    addr: SocketAddr,
    serving: ServingPair,
    cert_dir: PathBuf,
    probe_namespace: String,
    probes: Vec<Probe>,
    crds: Vec<(String, String)>,
    cleanup: Cleanup,
    timeout: Duration,
    /// Bound but never listening, so a call to it is refused at once: the probe webhooks
    /// point here. Held so no one else can take the port meanwhile.
    _refusing: tokio::net::TcpSocket,
    removed: bool,
}

impl fmt::Debug for InstalledWebhooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstalledWebhooks")
            .field("addr", &self.addr)
            .field("cert_dir", &self.cert_dir)
            .field("mutating", &self.cleanup.mutating)
            .field("validating", &self.cleanup.validating)
            .field("conversion_crds", &self.cleanup.crds)
            .finish_non_exhaustive()
    }
}

impl InstalledWebhooks {
    /// The address the API server calls (`127.0.0.1:PORT`): bind the webhook server here.
    ///
    /// The port was free when the install picked it, and nothing in this process is handed
    /// it again, but another process could take it before the test's server binds it (as
    /// with Go's envtest); the server's bind then fails with "address in use".
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:PORT` followed by `path`: what the API server calls for `path`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The serving certificate (PEM), for `127.0.0.1` and `localhost`, signed by
    /// [`ca_pem`](Self::ca_pem).
    pub fn cert_pem(&self) -> &str {
        &self.serving.cert
    }

    /// The serving certificate's private key (PEM, PKCS#8).
    pub fn key_pem(&self) -> &str {
        &self.serving.key
    }

    /// The CA the configurations' `caBundle` holds (PEM); a test's own client can trust it.
    pub fn ca_pem(&self) -> &str {
        &self.serving.ca_cert
    }

    /// A directory holding `tls.crt`, `tls.key` (the serving pair) and `ca.crt`, for servers
    /// that read a certificate directory. It is inside the control plane's directory and
    /// goes with this value.
    pub fn cert_dir(&self) -> &Path {
        &self.cert_dir
    }

    /// A new serving certificate and key (PEM, for `127.0.0.1` and `localhost`) signed by the
    /// same CA as [`cert_pem`](Self::cert_pem), which the API server trusts: what a test of
    /// certificate rotation swaps in while the API server keeps calling.
    ///
    /// # Errors
    ///
    /// [`Error::WebhookCertificates`] if the certificate cannot be made.
    pub fn issue_serving_pair(&self) -> Result<(String, String)> {
        self.serving
            .reissue("rudder-envtest-webhook")
            .map_err(Error::WebhookCertificates)
    }

    /// The names of the installed mutating webhook configurations (with the namespace
    /// appended when installed for a [`TestNamespace`]).
    pub fn mutating_configurations(&self) -> &[String] {
        &self.cleanup.mutating
    }

    /// The names of the installed validating webhook configurations.
    pub fn validating_configurations(&self) -> &[String] {
        &self.cleanup.validating
    }

    /// The names of the CRDs whose conversion calls the webhook server.
    pub fn conversion_crds(&self) -> &[String] {
        &self.cleanup.crds
    }

    /// Waits until the API server enforces every installed configuration and reports every
    /// CRD's webhook conversion. The install already did this; call it again after changing
    /// a configuration behind the install's back, or to check.
    ///
    /// It works whether or not the test's server runs. Each installed configuration carries
    /// one extra webhook of the install's own (named `<token>.probe.envtest.rudder.rs`) that
    /// selects only ConfigMaps labelled [`PROBE_LABEL`]` = <token>`, points at a port that
    /// refuses connections, and fails closed. A dry-run create of such a ConfigMap is
    /// admitted while the API server has not yet seen the configuration, and rejected, with
    /// a message naming the probe webhook, once it has. The API server reads a configuration
    /// as one object, so once its probe webhook is called, so are the test's webhooks in it.
    /// The test's own webhooks never see the probes (they exclude [`PROBE_LABEL`]).
    ///
    /// A CRD counts once the stored CRD is established and says `strategy: Webhook` with
    /// this install's URL. The API server's CRD handler switches to the new converter when
    /// its own informer sees that, which no request can observe without an object to
    /// convert, so a conversion within milliseconds of the install could still use the old
    /// strategy.
    ///
    /// # Errors
    ///
    /// [`Error::WebhookNotEnforced`] after `timeout`, saying what the last check saw;
    /// [`Error::Kube`] if no client can be built.
    pub async fn wait_until_enforced(&self, timeout: Duration) -> Result<()> {
        let client = self.cleanup.client()?;
        probe::wait_until_enforced(
            client,
            &self.probe_namespace,
            &self.probes,
            &self.crds,
            timeout,
        )
        .await
    }

    /// Deletes the configurations, turns the CRDs' conversion back to `None` and removes the
    /// certificate directory, reporting the first failure (dropping does the same and only
    /// logs failures).
    ///
    /// # Errors
    ///
    /// [`Error::Kube`] if a request fails (a configuration already gone is not a failure);
    /// [`Error::Io`] if the directory cannot be removed.
    pub async fn uninstall(mut self) -> Result<()> {
        self.removed = true;
        let deleted = self.cleanup.run().await;
        let removed = remove_dir(&self.cert_dir);
        deleted.and(removed)
    }
}

impl Drop for InstalledWebhooks {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        self.cleanup.run_detached();
        if let Err(e) = remove_dir(&self.cert_dir) {
            tracing::warn!(error = %e, "could not remove the webhook certificates");
        }
    }
}
