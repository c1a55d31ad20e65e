//! The Rust side of `cargo xtask bench-webhook`: a mutating webhook for Pods that adds one
//! label, served by `rudder_webhook` as an operator would serve it (the multi-thread tokio
//! runtime, a typed [`Defaulter`], certificates from a directory).
//!
//! ```text
//! cargo run --release -p rudder-webhook --example bench_server -- \
//!     --addr 127.0.0.1:9443 --cert-dir /path/with/tls.crt-and-tls.key
//! ```
//!
//! It serves `/mutate` until killed. The answer is a JSON patch computed from the Pod as
//! received to the defaulted one (what every typed defaulter costs), where Go's comparator
//! writes a fixed one-operation patch.

// A command-line tool reports to its terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use rudder_webhook::admission::{Defaulter, Denial, Warnings};
use rudder_webhook::{Options, Webhook, WebhookServer};

/// The label the webhook adds, and its value.
const LABEL: (&str, &str) = ("defaulted-by", "webhook");

const USAGE: &str = "usage: bench_server --addr IP:PORT --cert-dir DIR";

/// Adds [`LABEL`] to every Pod that lacks it.
struct AddLabel;

impl Defaulter<Pod> for AddLabel {
    async fn default(
        &self,
        pod: &mut Pod,
        _request: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .entry(LABEL.0.to_owned())
            .or_insert_with(|| LABEL.1.to_owned());
        Ok(Vec::new())
    }
}

fn parse_args() -> Result<(SocketAddr, PathBuf), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut addr = None;
    let mut cert_dir = None;
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let value = rest
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--addr" => {
                addr = Some(
                    value
                        .parse::<SocketAddr>()
                        .map_err(|e| format!("bad --addr {value}: {e}"))?,
                );
            }
            "--cert-dir" => cert_dir = Some(PathBuf::from(value)),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    match (addr, cert_dir) {
        (Some(addr), Some(dir)) => Ok((addr, dir)),
        _ => Err(USAGE.to_owned()),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let (addr, cert_dir) = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let server = WebhookServer::new(Options::new().bind_address(addr).cert_dir(cert_dir));
    if let Err(error) = server.register("/mutate", Webhook::defaulter::<Pod, _>(AddLabel)) {
        eprintln!("cannot register the webhook: {error}");
        return ExitCode::FAILURE;
    }
    let running = match server.start().await {
        Ok(running) => running,
        Err(error) => {
            eprintln!("cannot start the webhook server: {error:?}");
            return ExitCode::FAILURE;
        }
    };
    println!("serving https://{}/mutate", running.local_addr());
    // Serves until the process is killed.
    std::future::pending::<()>().await;
    ExitCode::SUCCESS
}
