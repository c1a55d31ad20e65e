//! The one error every scaffold returns.

use std::path::PathBuf;

/// Why a scaffold could not be made. None of these is worth retrying unchanged: each names
/// the input or the file to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name, kind, group or argument does not meet its rules; the message says which.
    #[error("{0}")]
    Invalid(String),
    /// The directory to create already exists; a scaffold never writes over anything.
    #[error("{} already exists: pick another name, or remove it", .0.display())]
    Exists(PathBuf),
    /// Reading or writing a file or directory failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done: `write`, `create`, `read`, ...
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A command the scaffold runs (`cargo new`, `cargo fmt`, `cargo locate-project`)
    /// could not start or failed.
    #[error("{command} failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status and what it printed to stderr, or why it could not start.
        detail: String,
    },
    /// `cargo rudder envtest` could not find, download, verify or install a control plane;
    /// the inner error says which and whether retrying may help.
    #[error(transparent)]
    Envtest(#[from] rudder_envtest_setup::Error),
    /// A template kept a `{{...}}` placeholder no value was given for: a bug in the
    /// templates, not in the input.
    #[error("template left a placeholder in {}: {rest}", path.display())]
    Placeholder {
        /// The file being generated.
        path: PathBuf,
        /// The text from the placeholder on.
        rest: String,
    },
}

/// The result of a scaffold.
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
