//! [`TestNamespace::install_webhooks`] and [`TestEnv::install_webhooks`]: certificates, a
//! port, the rewritten configurations applied, and the wait until they are enforced.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

use super::cleanup::Cleanup;
use super::probe::Probe;
use super::rewrite::Rewrite;
use super::{InstalledWebhooks, WebhookOptions};
use crate::certs::ServingPair;
use crate::crd::apply_crds;
use crate::env::TestEnv;
use crate::error::{Error, Result};
use crate::namespace::TestNamespace;
use crate::ports::free_ports;
#[cfg(doc)]
use crate::{NAMESPACE_LABEL, PROBE_LABEL};

impl TestNamespace {
    /// Installs webhooks that only this namespace's objects reach, and returns once the API
    /// server calls them (see [`InstalledWebhooks::wait_until_enforced`]), with what the
    /// test's server needs. Tests sharing a control plane do not see each other's webhooks.
    ///
    /// Besides what [`TestEnv::install_webhooks`] does, for each admission webhook:
    ///
    /// - its `namespaceSelector` gains the requirement [`NAMESPACE_LABEL`]` In [<this
    ///   namespace>]`, ANDed with what it had, so objects elsewhere never reach it. A
    ///   namespaceSelector does not apply to cluster-scoped objects other than namespaces:
    ///   a webhook on those needs an `objectSelector` of the test's own;
    /// - each configuration's name gets `-<namespace>` appended, so tests can install the
    ///   same configuration side by side.
    ///
    /// CRD conversion is cluster-wide by nature: a CRD should be installed with conversion by
    /// one test at a time (or use a CRD per test).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidWebhook`] for a configuration or CRD without a name;
    /// [`Error::Kube`] if the API server rejects one; [`Error::WebhookNotEnforced`] if not
    /// enforced within the builder's `webhook_timeout` (30 s by default). What was installed
    /// before the failure is removed again.
    pub async fn install_webhooks(&self, options: WebhookOptions) -> Result<InstalledWebhooks> {
        install(
            &self.config,
            Some(self.name()),
            &self.env_dir,
            options,
            self.webhook_timeout,
        )
        .await
    }
}

impl TestEnv {
    /// Installs webhooks for the whole cluster, and returns once the API server calls them
    /// (see [`InstalledWebhooks::wait_until_enforced`]), with what the test's server needs.
    /// On a control plane shared between tests, prefer
    /// [`TestNamespace::install_webhooks`], which keeps each test's webhooks to itself.
    ///
    /// It generates a CA and a serving certificate for `127.0.0.1` and `localhost`, picks a
    /// free loopback port, and rewrites:
    ///
    /// - each webhook's `clientConfig` to `url: https://127.0.0.1:PORT<path>` (the path of
    ///   its `service` or `url`, `/` if none) with the CA as `caBundle`; an empty
    ///   `sideEffects` becomes `None` and empty `admissionReviewVersions` become `[v1]`; its
    ///   `objectSelector` gains `envtest.rudder.rs/probe DoesNotExist` (see
    ///   [`PROBE_LABEL`]);
    /// - each configuration gains one probe webhook of the install's own;
    /// - each conversion CRD's `spec.conversion` to `strategy: Webhook` at
    ///   `https://127.0.0.1:PORT/convert` (or its own webhook's path) with the CA, and
    ///   `conversionReviewVersions: [v1]` unless it names some.
    ///
    /// Then it server-side applies them (field manager `rudder-envtest`, forced).
    ///
    /// # Errors
    ///
    /// As [`TestNamespace::install_webhooks`].
    pub async fn install_webhooks(&self, options: WebhookOptions) -> Result<InstalledWebhooks> {
        install(
            self.config(),
            None,
            self.dir(),
            options,
            self.webhook_timeout(),
        )
        .await
    }
}

/// Installs `options` (for `namespace`, or the whole cluster) and waits until they are
/// enforced; what was installed before a failure is removed again.
async fn install(
    config: &kube::Config,
    namespace: Option<&str>,
    env_dir: &Path,
    options: WebhookOptions,
    timeout: Duration,
) -> Result<InstalledWebhooks> {
    let serving = ServingPair::generate("rudder-envtest-webhook-ca", "rudder-envtest-webhook")
        .map_err(Error::WebhookCertificates)?;
    let [port] = free_ports()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let refusing = refusing_socket()?;
    let probe_port = refusing
        .local_addr()
        .map_err(|source| Error::Io {
            action: "read the address of a socket bound on",
            path: PathBuf::from("127.0.0.1"),
            source,
        })?
        .port();
    let cert_dir = cert_dir(env_dir)?;
    let rewrite = Rewrite {
        base: format!("https://{addr}"),
        probe_base: format!("https://127.0.0.1:{probe_port}"),
        ca_bundle: ByteString(serving.ca_cert.clone().into_bytes()),
        namespace: namespace.map(str::to_owned),
    };
    // From here on, dropping `installed` on an error removes what was installed so far.
    let mut installed = InstalledWebhooks {
        addr,
        serving,
        cert_dir,
        probe_namespace: namespace.unwrap_or("default").to_owned(),
        probes: Vec::new(),
        crds: Vec::new(),
        cleanup: Cleanup {
            config: config.clone(),
            mutating: Vec::new(),
            validating: Vec::new(),
            crds: Vec::new(),
        },
        timeout,
        _refusing: refusing,
        removed: false,
    };
    write_certificates(&installed.cert_dir, &installed.serving)?;
    let client = installed.cleanup.client()?;
    apply_mutating(&mut installed, &client, &rewrite, options.mutating).await?;
    apply_validating(&mut installed, &client, &rewrite, options.validating).await?;
    apply_conversions(&mut installed, &client, &rewrite, options.conversion_crds).await?;
    installed.wait_until_enforced(installed.timeout).await?;
    tracing::debug!(
        addr = %installed.addr,
        configurations = installed.probes.len(),
        crds = installed.crds.len(),
        "webhooks installed and enforced"
    );
    Ok(installed)
}

/// Writes `tls.crt`, `tls.key` and `ca.crt` into `dir`.
fn write_certificates(dir: &Path, serving: &ServingPair) -> Result<()> {
    for (file, text) in [
        ("tls.crt", &serving.cert),
        ("tls.key", &serving.key),
        ("ca.crt", &serving.ca_cert),
    ] {
        let path = dir.join(file);
        fs::write(&path, text).map_err(|source| Error::Io {
            action: "write",
            path,
            source,
        })?;
    }
    Ok(())
}

/// The apply every install makes: server-side, forced, as envtest's field manager.
fn apply_params() -> PatchParams {
    PatchParams::apply(crate::APPLY_FIELD_MANAGER).force()
}

/// Applies each mutating configuration rewritten with a probe, recording it for removal
/// before it is sent.
async fn apply_mutating(
    installed: &mut InstalledWebhooks,
    client: &kube::Client,
    rewrite: &Rewrite,
    configurations: Vec<MutatingWebhookConfiguration>,
) -> Result<()> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    for cfg in configurations {
        let name = rewrite.name("MutatingWebhookConfiguration", &cfg.metadata)?;
        let probe = Probe::new(format!("MutatingWebhookConfiguration {name}"))?;
        let cfg = rewrite.mutating(cfg, &name, &probe);
        installed.cleanup.mutating.push(name.clone());
        api.patch(&name, &apply_params(), &Patch::Apply(&cfg))
            .await
            .map_err(|source| Error::Kube {
                context: format!("apply MutatingWebhookConfiguration {name}"),
                source,
            })?;
        installed.probes.push(probe);
    }
    Ok(())
}

/// Applies each validating configuration as [`apply_mutating`] does the mutating ones.
async fn apply_validating(
    installed: &mut InstalledWebhooks,
    client: &kube::Client,
    rewrite: &Rewrite,
    configurations: Vec<ValidatingWebhookConfiguration>,
) -> Result<()> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    for cfg in configurations {
        let name = rewrite.name("ValidatingWebhookConfiguration", &cfg.metadata)?;
        let probe = Probe::new(format!("ValidatingWebhookConfiguration {name}"))?;
        let cfg = rewrite.validating(cfg, &name, &probe);
        installed.cleanup.validating.push(name.clone());
        api.patch(&name, &apply_params(), &Patch::Apply(&cfg))
            .await
            .map_err(|source| Error::Kube {
                context: format!("apply ValidatingWebhookConfiguration {name}"),
                source,
            })?;
        installed.probes.push(probe);
    }
    Ok(())
}

/// Applies the CRDs with their conversion pointed at the test's server, recorded for
/// removal first, and waits until they are established.
async fn apply_conversions(
    installed: &mut InstalledWebhooks,
    client: &kube::Client,
    rewrite: &Rewrite,
    conversion_crds: Vec<CustomResourceDefinition>,
) -> Result<()> {
    let mut crds = Vec::new();
    for mut crd in conversion_crds {
        let name = crd
            .metadata
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::InvalidWebhook {
                what: "a CustomResourceDefinition".to_owned(),
                reason: "it has no metadata.name".to_owned(),
            })?;
        let url = rewrite.conversion(&mut crd);
        installed.cleanup.crds.push(name.clone());
        installed.crds.push((name, url));
        crds.push(crd);
    }
    if !crds.is_empty() {
        apply_crds(client, crds, installed.timeout).await?;
    }
    Ok(())
}

/// A loopback socket bound to a port of the kernel's choosing but not listening: connecting
/// to it is refused at once, and no one else can bind the port while it is held.
fn refusing_socket() -> Result<tokio::net::TcpSocket> {
    let io = |source| Error::Io {
        action: "bind a socket on",
        path: PathBuf::from("127.0.0.1"),
        source,
    };
    let socket = tokio::net::TcpSocket::new_v4().map_err(io)?;
    socket
        .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .map_err(io)?;
    Ok(socket)
}

/// A fresh directory for one install's certificates, inside the control plane's directory so
/// that its watchdog removes it too.
fn cert_dir(env_dir: &Path) -> Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = env_dir
        .join("webhooks")
        .join(COUNTER.fetch_add(1, Ordering::Relaxed).to_string());
    fs::create_dir_all(&dir).map_err(|source| Error::Io {
        action: "create",
        path: dir.clone(),
        source,
    })?;
    Ok(dir)
}
