//! The error type of every fallible rudder-envtest call.

use std::path::PathBuf;
use std::time::Duration;

/// What can go wrong while starting, using or stopping a control plane.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A binary was in none of the searched places. Retrying does not help: install it with
    /// `cargo rudder envtest use` (or `cargo xtask envtest install` in Rudder's repository),
    /// or point `RUDDER_ENVTEST_ASSETS` at official binaries.
    #[error(
        "could not find `{binary}` (searched {searched}); run `cargo rudder envtest use` \
         (in Rudder's repository, `cargo xtask envtest install`), or set RUDDER_ENVTEST_ASSETS \
         to a directory holding kube-apiserver and etcd"
    )]
    BinaryNotFound {
        /// The binary's file name.
        binary: &'static str,
        /// The places searched, in order.
        searched: String,
    },

    /// `kube-apiserver --version` could not be run or its answer not understood.
    #[error("could not read the version of {}: {reason}", path.display())]
    Version {
        /// The binary asked.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },

    /// The API server is older than 1.20, which this crate does not support.
    #[error("kube-apiserver {found} is too old: rudder-envtest needs 1.20 or newer")]
    UnsupportedVersion {
        /// The version the binary reported.
        found: String,
    },

    /// A file or directory of the control plane could not be written, read or removed.
    #[error("could not {action} {}", path.display())]
    Io {
        /// What was being done, for example `create the data directory`.
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A process could not be spawned (the binary is not executable, or the system is out of
    /// processes).
    #[error("could not start {}", path.display())]
    Spawn {
        /// The binary.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// Generating keys or certificates failed. This does not happen with a working crypto
    /// provider; retrying does not help.
    #[error("could not generate the control plane's certificates")]
    Certificates(#[source] rcgen::Error),

    /// A process exited during start, or did not become ready in time. The log path and its
    /// last lines say why; the temporary directory is kept for inspection.
    #[error(
        "{process} did not become ready: {reason}\n  log: {}\n  last lines of the log:\n{tail}",
        log.display()
    )]
    NotReady {
        /// `etcd`, `kube-apiserver` or `kube-controller-manager`.
        process: &'static str,
        /// What was observed: an exit status or a timeout.
        reason: String,
        /// The process's log file.
        log: PathBuf,
        /// The last lines of that log, indented.
        tail: String,
    },

    /// The operation would disturb a control plane other tests share
    /// ([`TestEnvBuilder::shared`](crate::TestEnvBuilder::shared)); start one of your own.
    #[error("cannot {0} on a shared control plane: other tests use it; start one of your own")]
    Shared(&'static str),

    /// The generated kubeconfig could not be turned into a client configuration.
    #[error("could not build a client configuration from the generated kubeconfig")]
    Kubeconfig(#[source] kube::config::KubeconfigError),

    /// A request to the API server failed. Whether retrying helps depends on the cause.
    #[error("request to the api server failed: {context}")]
    Kube {
        /// What was being done.
        context: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },

    /// A CustomResourceDefinition document did not parse.
    #[error("could not parse a CustomResourceDefinition from {origin}")]
    CrdYaml {
        /// The file, or `a string`.
        origin: String,
        /// The parser's error.
        #[source]
        source: serde_yaml::Error,
    },

    /// A CustomResourceDefinition was not established and served in time.
    #[error("CustomResourceDefinition {name} was not ready within {timeout:?}: {state}")]
    CrdNotReady {
        /// The CRD's name.
        name: String,
        /// How long was waited.
        timeout: Duration,
        /// What was missing.
        state: String,
    },

    /// Generating a webhook server's CA or serving certificate failed. This does not happen
    /// with a working crypto provider; retrying does not help.
    #[error("could not generate the webhook certificates")]
    WebhookCertificates(#[source] rcgen::Error),

    /// A webhook configuration or conversion CRD given to a webhook install cannot be
    /// installed as it is (for example it has no name). Retrying does not help.
    #[error("cannot install {what}: {reason}")]
    InvalidWebhook {
        /// The object, for example `a ValidatingWebhookConfiguration`.
        what: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The API server did not start calling an installed webhook (or did not report a CRD's
    /// webhook conversion) in time. The state says what the last check saw.
    #[error("{name} was not enforced by the api server within {timeout:?}: {state}")]
    WebhookNotEnforced {
        /// The configuration or CRD, with its kind.
        name: String,
        /// How long was waited.
        timeout: Duration,
        /// What the last check saw.
        state: String,
    },

    /// A change of a test user's permissions was not in effect within the timeout: the API
    /// server's authorizer still refused what was granted (`allowed`), or still allowed
    /// what was taken away (not `allowed`).
    #[error(
        "the authorizer still {} {user} to {what} after {timeout:?}",
        if *allowed { "did not allow" } else { "allowed" }
    )]
    NotAuthorized {
        /// The user's name.
        user: String,
        /// The answer waited for: `true` for a grant, `false` for a removal.
        allowed: bool,
        /// The verb and URL checked.
        what: String,
        /// How long was waited.
        timeout: Duration,
    },

    /// The shared control plane was started with other options than this call asks for. Use
    /// the same options everywhere in one test binary.
    #[error(
        "the shared control plane is already running {running}, but this call asks for {wanted}"
    )]
    SharedMismatch {
        /// The options it runs with.
        running: &'static str,
        /// The options this call asked for.
        wanted: &'static str,
    },

    /// A `/metrics` page could not be fetched from an operator under test.
    #[error("could not scrape http://{addr}/metrics: {reason}")]
    Scrape {
        /// The metrics server's address.
        addr: std::net::SocketAddr,
        /// What went wrong (connection, timeout, an answer other than 200).
        reason: String,
    },

    /// A [`WatchDelay`](crate::WatchDelay) could not start: it was started outside a tokio
    /// runtime, or no loopback port could be bound (retrying may help for that one).
    #[error("could not {action} the watch-delay proxy")]
    Proxy {
        /// What was being done, for example `listen on 127.0.0.1 for`.
        action: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A TLS client configuration could not be made from the CA certificates given (see
    /// [`tls`](crate::tls)). Retrying does not help: the certificates are wrong.
    #[error("could not make a TLS client: {reason}")]
    TlsClient {
        /// What was wrong with the certificates.
        reason: String,
    },
}

impl Error {
    /// A [`NotReady`](Error::NotReady) with `note` appended to its reason, in parentheses (what
    /// was last seen while waiting); any other error unchanged.
    pub(crate) fn noting(self, note: &str) -> Self {
        match self {
            Self::NotReady {
                process,
                reason,
                log,
                tail,
            } => Self::NotReady {
                process,
                reason: format!("{reason} ({note})"),
                log,
                tail,
            },
            other => other,
        }
    }
}

/// The result of rudder-envtest calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;
