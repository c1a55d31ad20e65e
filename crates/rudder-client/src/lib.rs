//! The reconciler's client: [`Client`] reads from the shared cache and writes to the API
//! server with the object's own `Api`, conditional on what was read; helpers on an `Api`
//! (owner references, create-or-update, create-or-patch, finalizers, server-side apply,
//! installing a CRD); the check of a cached read against the operator's declared RBAC
//! ([`reads`]); and tower layers that observe a client's answers ([`layers`]), composed once
//! where a client is built.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use rudder_client::{Client, create_or_patch};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let kube = kube::Client::try_default().await?;
//! let token = tokio_util::sync::CancellationToken::new();
//! let cache = rudder_cache::Cache::builder(kube.clone()).build(&token);
//! let client = Client::new(kube, cache, "my-operator");
//!
//! // Reads come from the cache (an informer of ConfigMaps in "default" starts on first use).
//! let settings = client
//!     .get::<ConfigMap>(&rudder_core::Request::namespaced("default", "settings"))
//!     .await?;
//! // Writes are inferred from the object: its type, its namespace.
//! let api = client.api::<ConfigMap>(Some("default"));
//! let (_, operation) = create_or_patch(&api, "derived", |cm: &mut ConfigMap| {
//!     let seen = settings.is_some().to_string();
//!     cm.data.get_or_insert_default().insert("settings-seen".into(), seen);
//!     Ok(())
//! })
//! .await?;
//! println!("derived: {operation:?}");
//! # Ok(())
//! # }
//! ```
//!
//! The facade (`rudder-runtime`, imported as `rudder`) re-exports this crate as
//! `rudder::client`, and gives each controller's reconciler a client of its manager's cache
//! through its `Tools`.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod helpers;
pub mod layers;
pub mod reads;
mod typed;

pub use helpers::*;
pub use typed::Client;
