//! Removing an install: deleting its configurations, turning its CRDs' conversion back to
//! `None`, removing its certificates; on request or when the handle is dropped.

use std::fs;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};

use crate::error::{Error, Result};

/// The removal half of an install: which objects to delete or revert, and how to reach the
/// API server from any runtime.
#[derive(Clone)]
pub(super) struct Cleanup {
    pub(super) config: kube::Config,
    pub(super) mutating: Vec<String>,
    pub(super) validating: Vec<String>,
    pub(super) crds: Vec<String>,
}

impl Cleanup {
    /// A client of the API server the webhooks are installed in, on the caller's runtime.
    pub(super) fn client(&self) -> Result<kube::Client> {
        kube::Client::try_from(self.config.clone()).map_err(|source| Error::Kube {
            context: "build a client".to_owned(),
            source,
        })
    }

    /// Deletes the configurations and turns the CRDs' conversion back to `None`, reporting
    /// the first failure (a configuration already gone is none).
    pub(super) async fn run(&self) -> Result<()> {
        let client = self.client()?;
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let crds: Api<CustomResourceDefinition> = Api::all(client);
        let mut first_error = None;
        let mut note = |context: String, result: kube::Result<()>| match result {
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                first_error.get_or_insert(Error::Kube { context, source });
            }
            Ok(()) => {}
        };
        for name in &self.mutating {
            let result = mutating.delete(name, &DeleteParams::default()).await;
            note(
                format!("delete MutatingWebhookConfiguration {name}"),
                result.map(|_| ()),
            );
        }
        for name in &self.validating {
            let result = validating.delete(name, &DeleteParams::default()).await;
            note(
                format!("delete ValidatingWebhookConfiguration {name}"),
                result.map(|_| ()),
            );
        }
        let none = serde_json::json!({
            "spec": { "conversion": { "strategy": "None", "webhook": null } }
        });
        for name in &self.crds {
            let result = crds
                .patch(name, &PatchParams::default(), &Patch::Merge(&none))
                .await;
            note(
                format!("turn off webhook conversion of CustomResourceDefinition {name}"),
                result.map(|_| ()),
            );
        }
        first_error.map_or(Ok(()), Err)
    }

    /// What [`run`](Self::run) does, on a thread and runtime of its own, within 10 s,
    /// logging a failure: for a drop, where the caller's runtime may be single-threaded,
    /// shutting down or absent.
    pub(super) fn run_detached(&self) {
        let cleanup = self.clone();
        // The caller's runtime may be single-threaded, shutting down or absent: a runtime of
        // our own on a thread of our own works in every case.
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: joined right here, for a drop that has no runtime to wait on"
        )]
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("could not start a runtime: {e}"))?;
            runtime.block_on(async {
                match tokio::time::timeout(Duration::from_secs(10), cleanup.run()).await {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(_) => Err("took over 10 s".to_owned()),
                }
            })
        })
        .join();
        match deleted {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not remove the installed webhooks"),
            Err(_) => tracing::warn!("removing the installed webhooks panicked"),
        }
    }
}

/// Removes `dir` and what it holds; one already gone is no error.
pub(super) fn remove_dir(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
            action: "remove",
            path: dir.to_owned(),
            source: e,
        }),
        _ => Ok(()),
    }
}
