//! A real kube-apiserver and etcd on loopback for tests: start one in a few seconds, get a
//! `kube::Client`, throw it away.
//!
//! Start with [`TestEnv::builder`], or with [`TestEnvBuilder::shared`] for one control plane
//! per test binary and [`TestEnv::namespace`] for one namespace per test; wait for what the
//! server does with [`eventually`] (a poll with a deadline, [`poll`] has the others), never a
//! fixed sleep.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{ObjectMeta, PostParams};
//! use rudder_envtest::TestEnv;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // Started once per test binary, on first use; each test gets its own namespace.
//! let env = TestEnv::builder().shared().await?;
//! let ns = env.namespace("creates_a_config_map").await?;
//!
//! let cm = ConfigMap {
//!     metadata: ObjectMeta { name: Some("settings".into()), ..Default::default() },
//!     ..Default::default()
//! };
//! ns.api::<ConfigMap>().create(&PostParams::default(), &cm).await?;
//!
//! // Or a control plane of its own, with garbage collection and namespace deletion.
//! let own = TestEnv::builder().controller_manager(true).start().await?;
//! println!("{} at {}", own.version(), own.kubeconfig_path().display());
//! own.stop()?;
//! # Ok(())
//! # }
//! ```
//!
//! # Getting the binaries
//!
//! The control plane needs `kube-apiserver` and `etcd`; `kube-controller-manager` when
//! [`TestEnvBuilder::controller_manager`] is on; `kube-scheduler`, `kwok` and KWOK's stages
//! file (`kwok-stages.yaml`, beside `kwok`) when [`TestEnvBuilder::nodes`] asks for fake nodes.
//! They are looked up, each on its own, in:
//!
//! 1. the builder's [`binary_dir`](TestEnvBuilder::binary_dir), if set;
//! 2. the directory in `RUDDER_ENVTEST_ASSETS` ([`ASSETS_ENV`]);
//! 3. the install cache, [`cache_dir`]`/v<version>/`, newest version first;
//! 4. `PATH`.
//!
//! Outside Rudder's repository, `cargo rudder envtest use [VERSION]` (from `cargo install
//! cargo-rudder`) fills the cache: it downloads the release's official binaries (the envtest
//! archives `setup-envtest` uses, Kubernetes' release downloads, KWOK's release), verifies
//! their SHA-512 and installs them as `v<version>/`, so tests find them with nothing set.
//! [`setup`] is the same code as a library, for a test harness or a build step:
//!
//! ```no_run
//! # fn demo() -> Result<(), rudder_envtest::setup::Error> {
//! use rudder_envtest::setup::Installer;
//!
//! let installed = Installer::new()?.ensure(&"1.37.x".parse()?)?;
//! println!("{} in {}", installed.version, installed.dir.display());
//! # Ok(())
//! # }
//! ```
//!
//! In Rudder's repository, `cargo xtask envtest install [--version X.Y.Z]` fills the same
//! cache by building kube-apiserver, kube-controller-manager and kube-scheduler of a current
//! release (1.37.2 by default) as Go modules with the machine's Go, etcd 3.6 and KWOK the
//! same way, so any machine with Go 1.26 and the Go module proxy can run every test. Or put
//! official binaries of any version from 1.20 on in a directory and point
//! `RUDDER_ENVTEST_ASSETS` at it. A missing binary is [`Error::BinaryNotFound`], whose
//! message says how to get it.
//!
//! # What runs
//!
//! - etcd with a fresh data directory, client and peer ports on 127.0.0.1.
//! - kube-apiserver on 127.0.0.1 with TLS from a CA generated for this run, RBAC
//!   authorization, and a static admin token in the group `system:masters`. Flags that
//!   versions differ on are chosen from `kube-apiserver --version` (see [`TestEnv::version`];
//!   [`TestEnv::server_version`] asks the running server).
//! - Optionally kube-controller-manager with only the `garbagecollector` and `namespace`
//!   controllers, so deleting an owner deletes its dependents and deleting a namespace
//!   removes its objects, as in a real cluster.
//! - Optionally kube-scheduler and [KWOK](https://kwok.sigs.k8s.io) playing the kubelets of
//!   fake nodes ([`TestEnvBuilder::nodes`]): Pods are bound to a node, get an IP, reach
//!   `Running` and `Ready`, and a deleted Pod goes away once "its
//!   kubelet" finishes it, as on a cluster; no container runs. The API server then runs
//!   without the `TaintNodesByCondition` admission plugin, whose `not-ready` taint only the
//!   node lifecycle controller (not run here) would lift.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::Pod;
//! use rudder_envtest::TestEnv;
//! use rudder_envtest::poll::eventually;
//!
//! # async fn demo(pod: Pod) -> Result<(), Box<dyn std::error::Error>> {
//! let env = TestEnv::builder().nodes(2).start().await?;
//! let ns = env.namespace("pods_run").await?;
//! let pods = ns.api::<Pod>();
//! pods.create(&Default::default(), &pod).await?;
//! let name = pod.metadata.name.clone().unwrap_or_default();
//! eventually("the Pod running", std::time::Duration::from_secs(30), async || {
//!     let phase = pods.get(&name).await.ok()?.status?.phase?;
//!     (phase == "Running").then_some(())
//! })
//! .await;
//! # Ok(())
//! # }
//! ```
//!
//! Everything lives in one temporary directory ([`TestEnv::dir`]): data, certificates, the
//! kubeconfig ([`TestEnv::kubeconfig_path`], usable with kubectl) and `logs/`.
//!
//! # Start time
//!
//! Measured on the project's machines (2 cores, Debian 12, another build running beside it)
//! with `cargo run -p rudder-envtest --example start -- --times 5`: from `start()` to a ready
//! API server, kube-apiserver v1.37.2 on etcd 3.6.16 takes 2.85 to 4.0 s, median 3.2 s
//! (v1.33.13: 2.85 to 4.4 s, median 3.6 s). With the controller manager, the scheduler and
//! two KWOK nodes Ready (`-- --times 3 --nodes 2 --controller-manager`): median 3.35 s on
//! v1.37.2, 3.55 s on v1.33.13, as those start once the API server is ready and the nodes
//! are Ready within a few hundred milliseconds. The shared control plane pays the start once
//! per test binary. `docs/envtest.md` has the install's figures.
//!
//! # Stopping, and tests that panic
//!
//! [`TestEnv::stop`] and `Drop` kill the processes, reap them and remove the directory, so a
//! test that panics (unwinding drops its `TestEnv`) leaves nothing behind. For what `Drop`
//! cannot cover (the shared control plane lives in a static that is never dropped, and a test
//! process can be killed) each control plane has a watchdog: a tiny `sh` reading from a pipe
//! that only the test process holds. When the test process ends, however it ends, the kernel
//! closes the pipe and the watchdog kills the processes' groups and removes the directory.
//!
//! When start fails, the error ([`Error::NotReady`]) names the log file and quotes the last
//! lines of the failing process's log; the directory is kept so the logs can be read.
//!
//! # Sharing one control plane
//!
//! Each `#[tokio::test]` runs on a runtime of its own, and a `kube::Client` belongs to the
//! runtime it was made on. So the shared [`TestEnv`] keeps only processes and configuration,
//! and [`TestEnv::client`] and [`TestEnv::namespace`] make a fresh client on the calling
//! test's runtime.
//!
//! # CustomResourceDefinitions
//!
//! [`TestEnv::install_crds`], [`TestEnv::install_crd_yaml`] and [`TestEnv::install_crd_file`]
//! apply CRDs and return once they are established and discovery serves them, so the next
//! request for a custom object succeeds. [`TestEnvBuilder::crds`] installs them during start.
//! [`TestCrd`] builds the CRD of a test's own kind (any fields in its `spec` and `status`)
//! without its YAML.
//!
//! # Webhooks
//!
//! [`TestNamespace::install_webhooks`] (or [`TestEnv::install_webhooks`], cluster-wide)
//! makes the API server call a webhook server the test runs on loopback, as Go's envtest
//! does. It generates a CA and a serving certificate for `127.0.0.1` and `localhost`, picks
//! a free port, rewrites each configuration's `clientConfig` to
//! `https://127.0.0.1:PORT<path>` (the path of its `service` or `url`) with the CA as
//! `caBundle`, points each conversion CRD at `https://127.0.0.1:PORT/convert`, applies them,
//! and returns once the API server enforces them, whether or not the test's server is up
//! yet ([`InstalledWebhooks::wait_until_enforced`] says how that is known without a sleep).
//! The returned [`InstalledWebhooks`] holds what the server needs: the address to bind, the
//! certificate and key (as PEM, and as `tls.crt`/`tls.key` in a directory), and the CA.
//!
//! Installed for a namespace, each webhook gets a namespaceSelector requirement on
//! [`NAMESPACE_LABEL`] and each configuration the namespace in its name, so tests sharing a
//! control plane neither see nor clash with each other's webhooks. Dropping the handle, or
//! [`InstalledWebhooks::uninstall`], deletes the configurations and turns the CRDs'
//! conversion back to `None`.
//!
//! The port is free when picked but is only bound when the test's server starts, so another
//! process could take it in between (Go's envtest has the same race); nothing in this process
//! is handed the same port twice.
//!
//! ```no_run
//! use k8s_openapi::api::admissionregistration::v1::{
//!     ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
//! };
//! use kube::api::ObjectMeta;
//! use rudder_envtest::{TestEnv, WebhookOptions};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let env = TestEnv::builder().shared().await?;
//! let ns = env.namespace("validates_config_maps").await?;
//! // As the project's manifests have it: only the Service's path is kept.
//! let config = ValidatingWebhookConfiguration {
//!     metadata: ObjectMeta { name: Some("validate-config-maps".into()), ..Default::default() },
//!     webhooks: Some(vec![ValidatingWebhook {
//!         name: "config-maps.example.com".into(),
//!         client_config: WebhookClientConfig {
//!             service: Some(ServiceReference {
//!                 name: "webhook".into(),
//!                 namespace: "system".into(),
//!                 path: Some("/validate-v1-configmap".into()),
//!                 port: None,
//!             }),
//!             ..Default::default()
//!         },
//!         // rules, failurePolicy, ...
//!         ..Default::default()
//!     }]),
//! };
//! let hooks = ns
//!     .install_webhooks(WebhookOptions { validating: vec![config], ..Default::default() })
//!     .await?;
//! // Start the webhook server on hooks.addr() with hooks.cert_pem() and hooks.key_pem(),
//! // or from hooks.cert_dir(); the API server already calls it.
//! println!("serve {} from {}", hooks.url("/validate-v1-configmap"), hooks.cert_dir().display());
//! # Ok(())
//! # }
//! ```
//!
//! Calling that server, a test trusts only the CA with [`tls::client_config_pem`] (with the
//! default `rustls-tls` feature); [`http::get`] reads a plain-HTTP server (probes, metrics)
//! and [`metrics`] the series on a Prometheus page.
//!
//! # Users other than the admin
//!
//! [`TestNamespace::service_account`] creates a ServiceAccount and returns it as a
//! [`TestUser`]: its user name, a bearer token from the TokenRequest API, and a client
//! acting as it, to test what a caller without the admin's rights sees (a `403`, say).
//! [`TestNamespace::grant_non_resource_urls`] lets such a user `get` `/metrics` (any verbs
//! on any non-resource URLs), and returns once the API server's authorizer says so.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let env = rudder_envtest::TestEnv::builder().shared().await?;
//! let ns = env.namespace("scrapes_metrics").await?;
//! let prometheus = ns.service_account("prometheus").await?;
//! ns.grant_non_resource_urls(&prometheus, &["get"], &["/metrics"]).await?;
//! // Scrape with `Authorization: Bearer {prometheus.token()}`.
//! let _version = prometheus.client().apiserver_version().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # A cache behind its own writes
//!
//! A controller's informer learns of a write some time after the write returned; on a busy
//! cluster that can be seconds, and a watch that is cut off learns of nothing until it is
//! back. [`WatchDelay`] makes that happen on purpose: a loopback proxy in front of the API
//! server that forwards every request at once but each watch event late (each line of a watch
//! goes out its delay after it arrived, in order), and with [`WatchDelay::stall`] not at all
//! until [`WatchDelay::resume`]. A controller run with [`WatchDelay::client`] then reconciles
//! from a stale cache, and the test shows what it does about it (a conflict on update, a
//! create that finds the object already there, a second reconcile once the event comes).
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use rudder_envtest::{TestEnv, WatchDelay};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let env = TestEnv::builder().shared().await?;
//! let slow = WatchDelay::start(env, Duration::from_millis(500))?;
//! let client = slow.client(); // for the controller under test
//! # drop(client);
//! slow.stall(); // its watches now see nothing
//! slow.resume(); // and now all they missed, in order
//! # Ok(())
//! # }
//! ```
//!
//! # Versions
//!
//! Any kube-apiserver from 1.20 on; flags that releases differ on are chosen from its
//! `--version`. The project tests on 1.37 (the default) and 1.33 (the oldest release
//! k8s-openapi 0.29 supports). What differs between those two, as seen through this crate
//! (`tests/server_features.rs` pins each):
//!
//! - Streaming lists (`sendInitialEvents=true`): served from 1.34, where the `WatchList` gate
//!   is on by default; 1.33 refuses such a watch with 422 unless the gate is turned on
//!   (`.apiserver_arg("--feature-gates=WatchList=true")`).
//! - resourceVersions are decimal integers that compare in write order from 1.35 (KEP-5504);
//!   before, they are opaque strings a client may only test for equality, even though 1.33's
//!   happen to look the same.
//! - ValidatingAdmissionPolicy (GA 1.30) and CRD `selectableFields` (GA 1.32) work on both.
//!
//! The watch cache is on, as on a cluster (tests that need it off pass
//! `--watch-cache=false` with [`TestEnvBuilder::apiserver_arg`]).
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `rustls-tls` | yes | the clients' TLS to the control plane with rustls and `ring` |
//! | `openssl-tls` | no | the clients' TLS with OpenSSL instead (turn default features off so as not to compile both) |
//!
//! [`cache_dir`]: setup::cache_dir
//! [`ASSETS_ENV`]: setup::ASSETS_ENV
//! [`eventually`]: poll::eventually

// Unit tests may spawn: the test is the owner. The library build keeps clippy's
// `disallowed_methods` (clippy.toml: a spawn is owned by whoever joins it).
#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests may spawn: the test owns its tasks"
    )
)]

mod apply;
mod binaries;
mod certs;
mod crd;
mod env;
mod error;
pub mod http;
pub mod least_privilege;
pub mod metrics;
mod namespace;
pub mod numbers;
pub mod poll;
mod ports;
mod process;
mod test_crd;
#[cfg(feature = "rustls-tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "rustls-tls")))]
pub mod tls;
mod users;
mod watch_delay;
mod webhook;

/// Downloading a control plane: finds a Kubernetes release in controller-tools' envtest
/// index, downloads and verifies it with kube-controller-manager, kube-scheduler and KWOK,
/// and installs it where [`TestEnv`] looks ([`cache_dir`](setup::cache_dir)). The `rudder-envtest-setup`
/// crate, which `cargo rudder envtest` runs too; its docs say what is verified and how.
pub use rudder_envtest_setup as setup;

pub use apply::APPLY_FIELD_MANAGER;
pub use crd::{crds_from_file, crds_from_yaml};
pub use env::{TestEnv, TestEnvBuilder};
pub use error::{Error, Result};
pub use namespace::{NAMESPACE_LABEL, TestNamespace};
pub use ports::free_port;
pub use test_crd::TestCrd;
pub use users::{GRANT_TIMEOUT, TEST_TOKEN_LIFETIME, TestUser};
pub use watch_delay::{FORWARD_TIMEOUT, WatchDelay};
pub use webhook::{InstalledWebhooks, PROBE_LABEL, WebhookOptions};
