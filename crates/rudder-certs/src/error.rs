//! [`Error`]: why the certificates could not be loaded, created or renewed.

/// Why [`SelfSigned::start`](crate::SelfSigned::start) (or a later check) could not get a
/// certificate to serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The Secret could not be read: the API server is unreachable, or this replica may
    /// not `get` Secrets in the namespace (RBAC). Retrying helps only with the former.
    #[error("cannot read Secret {namespace}/{name}")]
    Read {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
    /// The Secret did not exist and could not be created (RBAC `create`, or a missing
    /// namespace).
    #[error("cannot create Secret {namespace}/{name}")]
    Create {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
    /// A renewed certificate could not be written (RBAC `update`, or the API server). A
    /// conflict is not an error: another replica renewed first, and its certificate is used.
    #[error("cannot update Secret {namespace}/{name}")]
    Update {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
    /// A key or certificate could not be generated (not expected with P-256 keys).
    #[error("cannot generate a certificate")]
    Generate(#[source] rcgen::Error),
    /// The Secret's serving certificate and key cannot be served.
    #[error("the certificate in Secret {namespace}/{name} cannot be served")]
    Serve {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// Why.
        #[source]
        source: rudder_webhook::CertificateError,
    },
    /// The Secret exists but does not hold the expected keys, and could not be rewritten.
    #[error("Secret {namespace}/{name} does not hold usable certificates")]
    Invalid {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// What is wrong with it.
        #[source]
        source: crate::material::InvalidMaterial,
    },
}

/// A `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
