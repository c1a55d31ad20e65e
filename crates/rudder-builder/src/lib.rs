//! What the controller builders share: one controller [`Declaration`](declaration::Declaration)
//! (sources, handlers, predicates, options, permissions) that the facade's single-cluster
//! `ControllerBuilder` and rudder-fleet's `FleetControllerBuilder` both record into, so the two
//! cannot drift; the call order they check at compile time ([`order`]); the [`Tools`] a
//! reconciler is made from; and the builder API's [`Error`].
//!
//! This crate is an internal of Rudder: operators use it through the facade (`rudder-runtime`,
//! imported as `rudder`), which re-exports [`Tools`], [`Error`] and [`Result`] at its root and
//! [`FleetError`] as `rudder::FleetError`. Start with [`Tools`]:
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use rudder_builder::Tools;
//! use rudder_core::Request;
//! use rudder_manager::Manager;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let manager = Manager::builder(client).name("my-operator").build()?;
//! // What `complete_with` hands the function that makes a controller's reconciler.
//! let tools = Tools::new(&manager, "mirror");
//! let request = Request::namespaced("default", "settings");
//! // Read from the manager's shared cache (its informer starts on this first read).
//! if let Some(cm) = tools.get::<ConfigMap>(&request).await? {
//!     println!("{} keys", cm.data.as_ref().map_or(0, |d| d.len()));
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # One declaration
//!
//! A [`Declaration`](declaration::Declaration) records watches as makers, called where the
//! controller runs (a [`Place`](declaration::Place)): once on the manager for a single-cluster
//! controller, once per member for a fleet's. Its methods are the builders' methods; each
//! builder delegates to them and adds only what is its own (sharding and the informers' check
//! on a manager; instances per member on a fleet).
//!
//! # Call order
//!
//! [`order`] holds the marker traits that make a call before `for_` fail with a message that
//! names the fix, for both builders.
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `webhook` | no | `Error::Webhook`, for a webhook that cannot be registered (the facade's `webhook` feature turns it on) |

pub mod declaration;
mod error;
mod fleet_error;
pub mod order;
mod tools;

pub use error::{Error, Result};
pub use fleet_error::FleetError;
pub use tools::Tools;
