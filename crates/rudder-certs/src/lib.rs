//! Webhook serving certificates an operator makes itself: a CA and a serving certificate
//! kept in one Secret that every replica shares, renewed before they expire, swapped into
//! the webhook server without a restart, and the CA injected into webhook configurations and
//! CRDs. What cert-manager and its CA injector do for a Kubebuilder operator, without
//! installing them.
//!
//! Start with [`SelfSignedConfig::new`] and [`SelfSigned::new`]; plug
//! [`SelfSigned::store`] into the webhook server's
//! [`Options::certificate_store`](rudder_webhook::Options::certificate_store), and
//! [`start`](SelfSigned::start) it before the server starts. With `rudder-manager`, one
//! builder call (`ManagerBuilder::self_signed_webhook_certificates`) does all of this.
//!
//! ```no_run
//! use rudder_certs::{InjectTargets, SelfSigned, SelfSignedConfig};
//! use rudder_webhook::{Options, WebhookServer};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let certificates = SelfSigned::new(
//!     SelfSignedConfig::new("my-operator-webhook-certs", "my-operator", "my-operator-webhook")
//!         .inject(
//!             InjectTargets::new()
//!                 .mutating("my-operator-mutating")
//!                 .validating("my-operator-validating"),
//!         ),
//! );
//! let server = WebhookServer::new(Options::new().certificate_store(certificates.store().clone()));
//! // ... register webhooks on `server` ...
//! let running_certificates = certificates.start(client).await?; // the store is filled now
//! let running = server.start().await?;
//! // ... until the process stops:
//! running.stop(None).await;
//! running_certificates.stop(None).await;
//! # Ok(())
//! # }
//! ```
//!
//! # The Secret
//!
//! One Secret (type `kubernetes.io/tls`) holds everything: `tls.crt`/`tls.key` (the
//! serving certificate and key, for the Service's names `svc`, `svc.ns`, `svc.ns.svc`,
//! `svc.ns.svc.cluster.local` and any [extra names](SelfSignedConfig::extra_names)),
//! `ca-signer.crt`/`ca-signer.key` (the CA that signs them), `ca.crt` (the CA bundle
//! clients trust, injected as `caBundle`), and during a CA rotation the next CA. Keys are ECDSA P-256; the CA is valid ten years,
//! a serving certificate one year, by default.
//!
//! On [`start`](SelfSigned::start) a replica reads the Secret. If it does not exist, the
//! replica generates the CA and the serving certificate and creates it; if another replica
//! created it first (409), it reads theirs. Every replica therefore serves certificates
//! from one CA. If the Secret is unusable (keys missing, a key that does not match its
//! certificate), it is rewritten with new material.
//!
//! # Rotation
//!
//! Every [check interval](SelfSignedConfig::check_interval) (hourly by default) each
//! replica checks the Secret: when the serving certificate has less than
//! [`renew_before`](SelfSignedConfig::renew_before) left (90 days, at most half its
//! validity), is not for the configured names, or is not signed by the CA, the replica
//! issues a new one from the same CA and updates the Secret with the resourceVersion it
//! read, so exactly one replica's update wins; the others get a conflict and read the
//! winner's. Every replica watches the Secret (a watch field-selected on its name) and
//! swaps each new certificate into the store at once: no restart, no wait for a kubelet
//! volume sync. Connections already open keep the certificate they started with, which is
//! still valid.
//!
//! A serving certificate that already ends with its CA is not renewed (a new one would end
//! there too): the CA's rotation replaces it.
//!
//! The CA is rotated in three steps, each a resourceVersion-checked update of the Secret, so
//! that no call fails on the way. When the CA has less than
//! [`ca_renew_before`](SelfSignedConfig::ca_renew_before) left (a year, at most half its
//! validity), a replica generates the next CA and publishes it in the bundle beside the
//! current one (`ca-next.crt`/`ca-next.key`; serving certificates are still signed by the
//! current CA), and injection writes both. [`ca_overlap`](SelfSignedConfig::ca_overlap)
//! later (an hour by default: time for every configuration to be injected and the API server
//! to see it), the next CA becomes the signer and a new serving certificate is issued from
//! it; both CAs stay in the bundle, so a replica still serving the old certificate for a
//! moment is trusted too. Another `ca_overlap` later the old CA leaves the bundle. The
//! Secret's `ca-bundle-since` records when the bundle last changed. A CA that has expired or
//! is unusable anyway is replaced at once (new CA and certificate), and calls fail until the
//! new bundle is injected and seen (seconds).
//!
//! # CA injection
//!
//! With [`InjectTargets`], each replica watches the named `MutatingWebhookConfiguration`s,
//! `ValidatingWebhookConfiguration`s and CRDs (one watch each, field-selected by name)
//! and, whenever one's `caBundle` differs from the Secret's bundle, in any webhook entry or
//! in a CRD's webhook conversion, reads it and replaces it with the bundle set, carrying
//! the resourceVersion read; conflicts and failures are retried with backoff (100 ms
//! doubling to 10 s). An overwritten bundle (a Helm upgrade, a `kubectl apply`) is thus put
//! back within moments. A configuration created later is injected once its watch sees it.
//!
//! Injection runs on **every replica**, not only the leader: a CRD's conversion webhook is
//! on the path of the cache's own lists, and the manager elects a leader only after its
//! cache has synced, so a leader-only injector could wait for ever on a conversion that
//! needs it. Replicas do not fight: each writes the bundle of the one Secret they all
//! follow, only when the object differs, with the resourceVersion read.
//!
//! # Permissions
//!
//! In the Secret's namespace: `get`, `list`, `watch`, `create`, `update` on `secrets`. For
//! injection, cluster-wide: `get`, `list`, `watch`, `update`, `patch` on
//! `mutatingwebhookconfigurations` and `validatingwebhookconfigurations`
//! (`admissionregistration.k8s.io`) and `customresourcedefinitions`
//! (`apiextensions.k8s.io`).
//!
//! # TLS to the API server
//!
//! This crate chooses no TLS stack for its client: the binary does (the `rudder` facade's
//! `rustls-tls` feature, or a feature on `kube`).

mod config;
mod error;
mod inject;
mod material;
mod source;

pub use config::{
    DEFAULT_CA_OVERLAP, DEFAULT_CA_RENEW_BEFORE, DEFAULT_CA_VALIDITY, DEFAULT_CHECK_INTERVAL,
    DEFAULT_RENEW_BEFORE, DEFAULT_SERVING_VALIDITY, InjectTargets, SelfSignedConfig,
};
pub use error::{Error, Result};
pub use material::{
    CA_BUNDLE, CA_BUNDLE_SINCE, CA_NEXT_CRT, CA_NEXT_KEY, CA_SIGNER_CRT, CA_SIGNER_KEY,
    InvalidMaterial, TLS_CRT, TLS_KEY,
};
pub use source::{RunningCertificates, SelfSigned};
