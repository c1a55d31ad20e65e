//! Scaffolds for operators on Rudder: the library behind the `cargo rudder` command, which
//! Rudder's own `cargo xtask new-operator` and `new-controller` call too.
//!
//! Install the command with `cargo install --git https://github.com/rudder-rs/rudder
//! cargo-rudder` (`cargo install cargo-rudder` once 0.1.0 is published); then
//! `cargo rudder new PATH`
//! makes a standalone workspace for an operator (see [`new_operator`]) and
//! `cargo rudder new-controller NAME` adds a controller crate to a workspace (see
//! [`new_controller`]). From a program, render the files without writing anything:
//!
//! ```
//! use cargo_rudder::{Names, OperatorOptions, RudderSource, operator_files};
//!
//! let names = Names::new("widget-operator", Some("Widget"), Some("widgets.example.com"))?;
//! let options = OperatorOptions {
//!     webhook: true,
//!     // To work on Rudder itself: depend on a checkout instead of crates.io.
//!     rudder: RudderSource::Path("/src/rudder".into()),
//!     ..OperatorOptions::default()
//! };
//! for file in operator_files(&names, &options)? {
//!     println!("{}: {} bytes", file.path.display(), file.text.len());
//! }
//! # Ok::<(), cargo_rudder::Error>(())
//! ```
//!
//! # A test control plane
//!
//! `cargo rudder envtest use [VERSION]` downloads the control plane rudder-envtest runs
//! (kube-apiserver, etcd, kube-controller-manager, kube-scheduler, KWOK), checks each file
//! against its published SHA-512 (KWOK publishes none) and installs it where the tests look
//! (`~/.cache/rudder/envtest/vX.Y.Z/`); `envtest list` and `envtest cleanup` show and remove
//! installs. The library behind them is `rudder-envtest-setup` (re-exported as
//! `rudder_envtest::setup`).
//!
//! # Where Rudder comes from
//!
//! A generated project depends on Rudder's facade by version (`rudder-runtime = "0.1"`, this
//! crate's own `MAJOR.MINOR`; the package is `rudder-runtime` because the name `rudder` on
//! crates.io is an unrelated crate's, and its library is `rudder`, so code writes
//! `use rudder::...`) unless told otherwise: [`RudderSource::Path`] (`--rudder-path DIR`)
//! names a checkout of Rudder's repository: the dependency stays written as published, a
//! `[patch.crates-io]` section resolves it to the checkout, and the project starts from that
//! checkout's `Cargo.lock`; [`RudderSource::Git`] (`--rudder-git URL [--rudder-rev REV]`) a
//! git repository, named on the dependency line.
//!
//! # Which workspace a controller joins
//!
//! [`new_controller`] writes the crate where it is told and joins the workspace enclosing
//! that directory, as cargo finds it (`cargo locate-project --workspace`); the command puts
//! it at the root of the current directory's workspace, or of `--workspace DIR`'s. The crate
//! inherits what the workspace's `Cargo.toml` declares (its `[workspace.package]` fields,
//! `[workspace.dependencies]`, `[workspace.lints]`) and states the rest with the versions
//! Rudder is tested with.
//!
//! # Templates
//!
//! The templates are plain files in the crate's `templates/` directory, compiled in. They
//! name the scaffold with `{{name}}`, `{{crate}}`, `{{Kind}}` and `{{group}}`, keep or drop
//! `{{#webhook}}` and `{{#multi_cluster}}` sections (and their inverse, `{{^multi_cluster}}`,
//! kept without the switch), and every file is checked for a placeholder left unfilled
//! before anything is written.

mod cli;
mod controller;
mod envtest;
mod error;
mod names;
mod operator;
mod source;
mod template;

pub use cli::{HELP, run};
pub use controller::{ControllerOptions, controller_files, new_controller};
pub use error::{Error, Result};
pub use names::Names;
pub use operator::{OperatorOptions, new_operator, operator_files};
pub use source::RudderSource;
pub use template::GeneratedFile;
