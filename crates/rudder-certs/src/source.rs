//! [`SelfSigned`]: the certificate source that keeps a CA and a serving certificate in one
//! Secret, fills a [`CertificateStore`] from it, follows the Secret with a watch, and
//! renews what is due; [`RunningCertificates`]: its tasks once started.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use rudder_cache::watch::{self as engine, Event};
use rudder_core::ErrorChain;
use rudder_core::backoff::Backoff;
use rudder_webhook::CertificateStore;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{FIELD_MANAGER, SelfSignedConfig};
use crate::error::{Error, Result};
use crate::inject;
use crate::material::{Material, Plan};

/// The shortest wait before a failed check is tried again; it doubles up to the check
/// interval (at most a minute).
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Self-signed webhook certificates shared by every replica through one Secret.
///
/// [`store`](Self::store) is what the webhook server serves from (plug it in with
/// [`rudder_webhook::Options::certificate_store`]); [`start`](Self::start) fills it before
/// it returns, then keeps it current and injects the CA until
/// [`RunningCertificates::stop`]. Cloning gives another handle on the same store.
#[derive(Clone, Debug)]
pub struct SelfSigned {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: SelfSignedConfig,
    store: CertificateStore,
    /// The CA bundle (PEM) of the Secret last applied; `None` before the first load.
    bundle: watch::Sender<Option<String>>,
}

impl SelfSigned {
    /// A source for `config`. Nothing is read or written until [`start`](Self::start).
    pub fn new(config: SelfSignedConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                store: CertificateStore::new(),
                bundle: watch::Sender::new(None),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SelfSignedConfig {
        &self.inner.config
    }

    /// The store the webhook server serves from: empty until [`start`](Self::start), then
    /// always the Secret's current serving certificate.
    pub fn store(&self) -> &CertificateStore {
        &self.inner.store
    }

    /// The CA bundle (PEM) this replica last read from the Secret: what clients must
    /// trust, and what is injected as `caBundle`. `None` before [`start`](Self::start).
    pub fn ca_bundle(&self) -> Option<String> {
        self.inner.bundle.borrow().clone()
    }

    /// Reads the Secret (creating it with a new CA and serving certificate if it does not
    /// exist, or reading the one another replica created first), renews the serving
    /// certificate if it is due, and puts it in the [`store`](Self::store). Then, in tasks
    /// owned by the returned value, it watches the Secret (swapping in every change at
    /// once), checks every [check interval](SelfSignedConfig::check_interval) whether a
    /// renewal is due, and keeps the CA injected into the
    /// [targets](SelfSignedConfig::inject).
    ///
    /// # Errors
    ///
    /// [`Error`] if the Secret cannot be read, created or rewritten, or what it holds
    /// cannot be served: the webhook server must not start without a certificate.
    pub async fn start(&self, client: Client) -> Result<RunningCertificates> {
        let api: Api<Secret> = Api::namespaced(client.clone(), self.config().namespace());
        self.inner.ensure(&api).await?;
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        tasks.spawn(Arc::clone(&self.inner).follow(api, cancel.clone()));
        let targets = self.config().inject_targets();
        if !targets.is_empty() {
            tasks.spawn(inject::run(
                client,
                targets.clone(),
                self.inner.bundle.subscribe(),
                cancel.clone(),
            ));
        }
        Ok(RunningCertificates { cancel, tasks })
    }
}

/// The tasks of a started [`SelfSigned`]: the Secret's watch and renewal checks, and the CA
/// injection. Dropping it stops them too (aborted).
#[derive(Debug)]
pub struct RunningCertificates {
    cancel: CancellationToken,
    tasks: JoinSet<()>,
}

impl RunningCertificates {
    /// Stops the tasks and waits for them until `deadline` (`None`: as long as they take);
    /// a write in flight is let finish until then, what is left after is aborted.
    pub async fn stop(mut self, deadline: Option<Instant>) {
        self.cancel.cancel();
        let drain = async { while self.tasks.join_next().await.is_some() {} };
        match deadline {
            Some(deadline) => {
                if tokio::time::timeout_at(deadline, drain).await.is_err() {
                    tracing::warn!("certificate tasks still running at the deadline; aborting");
                    self.tasks.abort_all();
                }
            }
            None => drain.await,
        }
    }
}

impl Drop for RunningCertificates {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Inner {
    fn read_error(&self, source: kube::Error) -> Error {
        Error::Read {
            namespace: self.config.namespace().to_owned(),
            name: self.config.secret().to_owned(),
            source,
        }
    }

    /// Makes sure the Secret exists and holds material that serves the configuration now,
    /// writing it if not (exactly one writer wins: create, or update with the
    /// resourceVersion read; a loser reads the winner's), and applies it.
    async fn ensure(&self, api: &Api<Secret>) -> Result<()> {
        let (name, namespace) = (self.config.secret(), self.config.namespace());
        let now = SystemTime::now();
        let secret = match api.get_opt(name).await.map_err(|e| self.read_error(e))? {
            Some(secret) => secret,
            None => {
                let material = Material::generate(&self.config, now).map_err(Error::Generate)?;
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        namespace: Some(namespace.to_owned()),
                        labels: Some(
                            [(
                                "app.kubernetes.io/managed-by".to_owned(),
                                FIELD_MANAGER.to_owned(),
                            )]
                            .into(),
                        ),
                        ..ObjectMeta::default()
                    },
                    type_: Some("kubernetes.io/tls".to_owned()),
                    data: Some(material.to_data()),
                    ..Secret::default()
                };
                match api.create(&post_params(), &secret).await {
                    Ok(created) => {
                        tracing::info!(secret = %name, %namespace, "created the webhook certificates");
                        created
                    }
                    Err(kube::Error::Api(status)) if status.code == 409 => {
                        tracing::info!(secret = %name, %namespace, "another replica created the webhook certificates first");
                        api.get(name).await.map_err(|e| self.read_error(e))?
                    }
                    Err(source) => {
                        return Err(Error::Create {
                            namespace: namespace.to_owned(),
                            name: name.to_owned(),
                            source,
                        });
                    }
                }
            }
        };
        let plan = match Material::from_data(secret.data.as_ref()) {
            Ok(material) => match material.plan(&self.config, now) {
                Plan::Keep => None,
                plan => Some((
                    material.advance(&plan, &self.config, now),
                    format!("{plan:?}"),
                )),
            },
            Err(invalid) => Some((Material::generate(&self.config, now), invalid.to_string())),
        };
        let secret = match plan {
            None => secret,
            Some((material, reason)) => {
                let material = material.map_err(Error::Generate)?;
                let mut updated = secret;
                updated.data = Some(material.to_data());
                updated.string_data = None;
                // The update carries the resourceVersion read: of replicas deciding this at
                // once, exactly one wins.
                match api.replace(name, &post_params(), &updated).await {
                    Ok(written) => {
                        tracing::info!(secret = %name, %namespace, %reason, "renewed the webhook certificates");
                        written
                    }
                    Err(kube::Error::Api(status)) if status.code == 409 => {
                        tracing::info!(secret = %name, %namespace, "another replica renewed the webhook certificates first");
                        api.get(name).await.map_err(|e| self.read_error(e))?
                    }
                    Err(source) => {
                        return Err(Error::Update {
                            namespace: namespace.to_owned(),
                            name: name.to_owned(),
                            source,
                        });
                    }
                }
            }
        };
        self.apply(&secret)
    }

    /// Serves what `secret` holds and publishes its CA bundle.
    fn apply(&self, secret: &Secret) -> Result<()> {
        let (name, namespace) = (self.config.secret(), self.config.namespace());
        let material =
            Material::from_data(secret.data.as_ref()).map_err(|source| Error::Invalid {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source,
            })?;
        self.inner_set(&material).map_err(|source| Error::Serve {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        })?;
        tracing::debug!(
            secret = %name,
            resource_version = ?secret.resource_version(),
            not_after = ?material.serving_not_after(),
            "serving the webhook certificate from the Secret"
        );
        Ok(())
    }

    fn inner_set(&self, material: &Material) -> Result<(), rudder_webhook::CertificateError> {
        self.store
            .set_pem(material.cert.as_bytes(), material.key.as_bytes())?;
        self.bundle.send_if_modified(|bundle| {
            let changed = bundle.as_deref() != Some(material.bundle.as_str());
            if changed {
                *bundle = Some(material.bundle.clone());
            }
            changed
        });
        Ok(())
    }

    /// Follows the Secret until `cancel`: every version the watch reports is served at
    /// once; every check interval (sooner after a failure, or when the watch shows
    /// something unusable or deleted) [`ensure`](Self::ensure) runs.
    async fn follow(self: Arc<Self>, api: Api<Secret>, cancel: CancellationToken) {
        let name = self.config.secret().to_owned();
        let interval = self.config.check_interval_value();
        let fields = format!("metadata.name={name}");
        let mut events =
            engine::watch(api.clone(), engine::Config::default().fields(&fields)).boxed();
        let mut next_check = Instant::now() + interval;
        let mut retry = Backoff::new(RETRY_MIN, interval.clamp(RETRY_MIN, RETRY_MAX));
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                event = events.next() => match event {
                    Some(Ok(Event::Apply(secret) | Event::InitApply(secret))) => {
                        let usable = Material::from_data(secret.data.as_ref())
                            .is_ok_and(|m| m.plan(&self.config, SystemTime::now()) == Plan::Keep);
                        if let Err(error) = self.apply(&secret) {
                            tracing::warn!(error = %ErrorChain(&error), "the Secret's certificate cannot be served; keeping the current one");
                        }
                        if !usable {
                            next_check = Instant::now();
                        }
                    }
                    Some(Ok(Event::Delete(_))) => {
                        tracing::warn!(secret = %name, "the certificate Secret was deleted; creating it again");
                        next_check = Instant::now();
                    }
                    Some(Ok(Event::Init | Event::InitDone)) => {}
                    Some(Err(error)) => {
                        tracing::warn!(secret = %name, error = %ErrorChain(&error), "watching the certificate Secret failed; retrying");
                    }
                    // The engine retries for ever; should it end, the checks still run.
                    None => events = futures::stream::pending().boxed(),
                },
                () = tokio::time::sleep_until(next_check) => {
                    match self.ensure(&api).await {
                        Ok(()) => {
                            retry.reset();
                            next_check = Instant::now() + interval;
                        }
                        Err(error) => {
                            let wait = retry.next_delay();
                            tracing::warn!(secret = %name, error = %ErrorChain(&error), retry_in = ?wait, "checking the webhook certificates failed");
                            next_check = Instant::now() + wait;
                        }
                    }
                }
            }
        }
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}
