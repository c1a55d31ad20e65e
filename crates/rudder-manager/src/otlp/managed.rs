//! The manager's exporter: built (or handed over) when it starts, shut down last when it
//! stops, within its stop's deadline.

use std::sync::Mutex;

use rudder_core::sync::LockExt;

use super::{Otlp, OtlpExporter};

/// What the builder was told, then what runs.
#[derive(Debug)]
pub(crate) struct Managed {
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    /// Built from this configuration at start.
    Configured(Otlp),
    /// Running: its layer is under the subscriber (the manager's or the program's).
    Running(OtlpExporter),
    /// Nothing to export, or stopped.
    Off,
}

impl Managed {
    /// An exporter to build at start from `otlp`, with the manager's name as the default
    /// service name and `cluster` as `k8s.cluster.name`.
    pub(crate) fn configured(otlp: Otlp, name: &str, cluster: Option<String>) -> Self {
        let mut otlp = otlp;
        if otlp.service_name.is_none() {
            otlp.service_name = Some(name.to_owned());
        }
        if otlp.cluster_name.is_none() {
            otlp.cluster_name = cluster;
        }
        Self {
            state: Mutex::new(State::Configured(otlp)),
        }
    }

    /// An exporter the program made (its layer under the program's subscriber), for the
    /// manager to shut down.
    pub(crate) fn given(exporter: OtlpExporter) -> Self {
        Self {
            state: Mutex::new(State::Running(exporter)),
        }
    }

    /// At start: builds the configured exporter, if an endpoint is configured, and installs
    /// its layer as the global subscriber. A configuration that does not build, or a
    /// subscriber already installed, is logged and leaves nothing running: tracing is not a
    /// reason for an operator not to run.
    pub(crate) fn start(&self) {
        let mut state = self.state.lock_unpoisoned();
        if !matches!(&*state, State::Configured(_)) {
            // Handed over (running under the program's subscriber), or started before.
            return;
        }
        let State::Configured(otlp) = std::mem::replace(&mut *state, State::Off) else {
            return;
        };
        if !otlp.is_configured() {
            return;
        }
        match otlp.build() {
            Ok(Some(exporter)) => {
                if exporter.install_global() {
                    tracing::info!("exporting spans over OTLP");
                    *state = State::Running(exporter);
                } else {
                    tracing::warn!(
                        "an OTLP endpoint is configured but a tracing subscriber is installed \
                         already: spans are not exported. Put OtlpExporter::layer under that \
                         subscriber and hand the exporter to ManagerBuilder::otlp_exporter"
                    );
                    // Dropping it shuts it down: nothing was exported through it yet.
                    drop(state);
                    drop(exporter);
                }
            }
            Ok(None) => {}
            Err(error) => tracing::error!(
                error = %rudder_core::ErrorChain(&error),
                "the OTLP exporter could not be built: spans are not exported"
            ),
        }
    }

    /// At the end of the stop: exports what is queued and joins the exporter's thread, by
    /// `deadline`.
    pub(crate) async fn stop(&self, deadline: Option<tokio::time::Instant>) {
        let running = std::mem::replace(&mut *self.state.lock_unpoisoned(), State::Off);
        if let State::Running(exporter) = running
            && let Err(error) = exporter.shutdown(deadline).await
        {
            tracing::warn!(error = %rudder_core::ErrorChain(&error), "spans may be lost");
        }
    }
}
