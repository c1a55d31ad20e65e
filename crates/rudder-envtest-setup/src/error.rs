//! The error of every [`Installer`](crate::Installer) call.

use std::path::PathBuf;

/// Why a control plane could not be found, downloaded, verified or installed.
///
/// Whatever the failure, nothing is left half-installed: a version directory exists only
/// once everything in it has been downloaded and verified. Network failures
/// ([`Error::Http`], [`Error::Status`] 5xx, [`Error::Truncated`]) may pass on retry; the others
/// name an input, a mirror or a file to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Neither `XDG_CACHE_HOME` nor `HOME` is set, so there is no default install directory;
    /// give one with [`Installer::with_dir`](crate::Installer::with_dir).
    #[error("no install directory: neither XDG_CACHE_HOME nor HOME is set")]
    NoCacheDir,

    /// A version selector is not `X.Y.Z`, `X.Y`, `X.Y.x` or `latest`.
    #[error("not a version selector: {0:?} (expected X.Y.Z, X.Y, X.Y.x or latest)")]
    InvalidSelector(String),

    /// A component name is not one of `controller-manager`, `scheduler`, `kwok`.
    #[error("unknown component {0:?} (expected controller-manager, scheduler, kwok, all or none)")]
    InvalidComponent(String),

    /// The request could not be made or its answer not read: no route, DNS, TLS, a timeout,
    /// a connection reset. Retrying may help.
    #[error("cannot download {url}: {source}")]
    Http {
        /// What was being downloaded.
        url: String,
        /// The client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The server answered with an error status (after following redirects). A 404 means
    /// the mirror lacks the file; a 5xx may pass on retry.
    #[error("cannot download {url}: the server answered {status}")]
    Status {
        /// What was being downloaded.
        url: String,
        /// The HTTP status code.
        status: u16,
    },

    /// The connection ended before the whole file arrived (fewer bytes than the server's
    /// `Content-Length`). Retrying may help.
    #[error("download of {url} was truncated: {received} of {expected} bytes arrived")]
    Truncated {
        /// What was being downloaded.
        url: String,
        /// The bytes received.
        received: u64,
        /// The bytes announced.
        expected: u64,
    },

    /// A small file (the index, a checksum) is larger than any real one could be.
    #[error("{url} is larger than {limit} bytes: not an index or checksum")]
    TooLarge {
        /// What was being downloaded.
        url: String,
        /// The limit in bytes.
        limit: u64,
    },

    /// The index does not parse as controller-tools' `envtest-releases.yaml`.
    #[error("cannot read the index {url}: {reason}")]
    Index {
        /// Where the index came from.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// No release in the index (or, offline, none installed) matches the selector.
    #[error("no release matches {selector} in {source_name}{}", known(.available))]
    UnknownVersion {
        /// The selector, as typed.
        selector: String,
        /// Where releases were looked for: the index's URL, or the install directory.
        source_name: String,
        /// The newest releases there are (at most ten), newest first.
        available: Vec<String>,
    },

    /// The index has the release, but no archive for this platform.
    #[error("{version} has no archive for {platform}{}", known(.available))]
    MissingPlatform {
        /// The release asked for.
        version: String,
        /// The platform asked for, `os/arch`.
        platform: String,
        /// The platforms the index has that release for.
        available: Vec<String>,
    },

    /// A download's SHA-512 is not the one published for it: a corrupt download or a
    /// tampered file. Nothing was installed.
    #[error("{url} failed verification: its SHA-512 is {actual}, expected {expected}")]
    HashMismatch {
        /// What was downloaded.
        url: String,
        /// The published hash, lowercase hex.
        expected: String,
        /// The downloaded file's hash, lowercase hex.
        actual: String,
    },

    /// A published checksum (the index's `hash`, a `.sha512` file) is not a SHA-512 in hex.
    #[error("{url}: not a SHA-512 checksum: {found:?}")]
    BadChecksum {
        /// Where the checksum came from.
        url: String,
        /// What was found instead (cut to 200 characters).
        found: String,
    },

    /// The verified archive is not a gzipped tar, or lacks a file the control plane needs.
    #[error("cannot unpack {url}: {reason}")]
    Archive {
        /// The archive.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Offline, and nothing installed matches (or the match lacks components asked for).
    #[error(
        "{selector} is not installed in {}{}: run without --offline to download it",
        dir.display(),
        missing_part(.missing)
    )]
    NotInstalled {
        /// The selector, as typed.
        selector: String,
        /// The install directory searched.
        dir: PathBuf,
        /// When a matching version is installed but incomplete: the files it lacks.
        missing: Vec<String>,
    },

    /// Reading or writing the install directory failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done: `create`, `write`, `rename`, `remove`, `read`.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// The result of an [`Installer`](crate::Installer) call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

fn known(available: &[String]) -> String {
    if available.is_empty() {
        String::new()
    } else {
        format!(" (there: {})", available.join(", "))
    }
}

fn missing_part(missing: &[String]) -> String {
    if missing.is_empty() {
        String::new()
    } else {
        format!(" (an install there lacks {})", missing.join(", "))
    }
}
