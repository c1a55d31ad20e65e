//! What the xtask commands and the bench package (`bench/`) share: running commands and
//! timing steps, the caches outside the checkout, Go on the repository's Go module, the
//! envtest control plane install, and the versions of what the project tests against.
//!
//! ```no_run
//! // The control plane the tests run on, installed if missing.
//! let assets = xtask::envtest::install(false)?;
//! println!("RUDDER_ENVTEST_ASSETS={}", assets.display());
//! # Ok::<(), String>(())
//! ```

// The commands' steps report to the terminal they run in; printing is their job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod envtest;
pub mod go;
pub mod util;
pub mod versions;
