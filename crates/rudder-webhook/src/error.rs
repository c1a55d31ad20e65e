//! The errors below the server that its parts share: [`RegisterError`] (registering a
//! webhook or a conversion) and [`Rejection`] (a request body that is not a review).

use http::StatusCode;

/// Why a webhook could not be registered. Nothing is registered when this is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// Another webhook is registered at the path. Registering it again does not help.
    #[error("a webhook is already registered at {path}")]
    DuplicatePath {
        /// The path.
        path: String,
    },
    /// The path does not start with `/`.
    #[error("webhook path {path:?} does not start with '/'")]
    InvalidPath {
        /// The path.
        path: String,
    },
    /// A conversion for this kind (group and kind) is already registered.
    #[error("a conversion for {kind} is already registered")]
    DuplicateConversion {
        /// The kind, as `Kind.group`.
        kind: String,
    },
    /// A served version of the kind has no conversion to and from the hub.
    #[error("no conversion for served versions {versions:?} of {kind} (hub {hub})")]
    UncoveredVersions {
        /// The kind, as `Kind.group`.
        kind: String,
        /// The hub version.
        hub: String,
        /// The served versions not covered.
        versions: Vec<String>,
    },
    /// A spoke's group or kind is not the hub's.
    #[error("spoke {spoke} is not a version of the hub's kind {kind}")]
    SpokeKindMismatch {
        /// The hub's kind, as `Kind.group`.
        kind: String,
        /// The spoke's `apiVersion`/`Kind`.
        spoke: String,
    },
}

/// An HTTP-level refusal (the body was not a review at all).
#[derive(Debug)]
pub(crate) struct Rejection {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}
