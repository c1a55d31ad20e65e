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

use crate::certs::ServingPair;
use crate::error::{Error, Result};
use cleanup::Cleanup;
use probe::Probe;

/// The label every [`TestNamespace`] carries, with the namespace's name as its value.
/// [`TestNamespace::install_webhooks`] scopes webhooks to the namespace with it.
pub const NAMESPACE_LABEL: &str = "envtest.rudder.rs/namespace";

/// The label of the objects that probe whether the API server enforces an installed
/// configuration. Installed webhooks never see objects carrying it: each gets
/// `objectSelector` requirement `envtest.rudder.rs/probe DoesNotExist`.
pub const PROBE_LABEL: &str = "envtest.rudder.rs/probe";

/// The path the probe webhooks point at (on a port that refuses connections).
pub(super) const PROBE_PATH: &str = "/rudder-envtest-probe";

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
}

pub(super) fn client(config: &kube::Config) -> Result<kube::Client> {
    kube::Client::try_from(config.clone()).map_err(|source| Error::Kube {
        context: "build a client".to_owned(),
        source,
    })
}
