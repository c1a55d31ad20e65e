//! The primary source of a sharded controller in [`ShardMode::Labels`]: one informer per
//! shard this replica holds (a label selector on the shard label), and one for objects not
//! labelled yet, whose objects the holder of their shard labels.
//!
//! The ring publishes a shard in its status only after opening it in the gate and drops it
//! before closing it, so the informer of a shard starts once its keys are admitted (its
//! first list queues every one of them) and stops before they no longer are.
//!
//! [`ShardMode::Labels`]: super::ShardMode::Labels

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Ring, RingStatus};
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Client;
use kube::api::{Patch, PatchParams};
use kube::core::{ObjectMeta, PartialObjectMeta};
use rudder_cache::{ApiScope, Cache, Informer, Scope, Typed};
use rudder_controller::{KeyLister, ShardGate};
use rudder_core::Event;
use rudder_core::Request;
use rudder_core::Source;
use rudder_core::SourceError;
use rudder_core::Started;
use rudder_core::Synced;
use rudder_core::sync::LockExt;
use rudder_handler::resubscribing;
use tokio::sync::{mpsc, watch};
use tokio_util::task::AbortOnDropHandle;

/// How many label patches one replica sends at once.
const LABEL_CONCURRENCY: usize = 8;

/// The counter of failed shard-label patches (label `ring`).
pub(crate) const LABEL_ERRORS_TOTAL: &str = "rudder_shard_label_errors_total";

/// The informers of the shards held now, by shard (one per default scope of the type).
type Current<K> = Arc<Mutex<BTreeMap<usize, Vec<Informer<K>>>>>;

/// An object to label: where it is, the label's value it has, and the shard it belongs to.
struct ToLabel {
    name: String,
    namespace: Option<String>,
    has: Option<String>,
    shard: usize,
}

impl ToLabel {
    fn new(meta: &ObjectMeta, label: &str, shard: usize) -> Option<Self> {
        Some(Self {
            name: meta.name.clone()?,
            namespace: meta.namespace.clone(),
            has: meta.labels.as_ref().and_then(|l| l.get(label)).cloned(),
            shard,
        })
    }
}

/// The source, and the key lister over the same informers (for the gate's resync and the
/// `rudder_shard_keys_owned` metric).
pub fn source<K: Typed>(
    cache: &Cache,
    client: &Client,
    ring: &Ring,
) -> (LabelSharded<K>, KeyLister) {
    let current: Current<K> = Arc::default();
    let listed = Arc::clone(&current);
    let keys: KeyLister = Arc::new(move || {
        listed
            .lock_unpoisoned()
            .values()
            .flatten()
            .flat_map(|informer| informer.store().list())
            .filter_map(|object| Request::from_object(&*object))
            .collect()
    });
    let source = LabelSharded {
        cache: cache.clone(),
        client: client.clone(),
        status: ring.status(),
        gate: ring.gate(),
        label: ring.config().shard_label(),
        ring: ring.config().ring().to_owned(),
        current,
    };
    (source, keys)
}

/// See the module docs.
pub struct LabelSharded<K> {
    cache: Cache,
    client: Client,
    status: watch::Receiver<RingStatus>,
    gate: ShardGate,
    label: String,
    ring: String,
    current: Current<K>,
}

/// `base` narrowed by one more label requirement.
fn narrowed(base: &Scope, requirement: &str) -> Scope {
    let mut scope = base.clone();
    scope.labels = Some(match &base.labels {
        Some(labels) if !labels.is_empty() => format!("{labels},{requirement}"),
        _ => requirement.to_owned(),
    });
    scope
}

/// `scope`'s informer's events, then its replacements' (a failed informer is replaced
/// through the cache, as a [`Kind`](rudder_handler::Kind) does); `replaced` hears of each.
fn resilient<T: Typed>(
    cache: Cache,
    scope: Scope,
    informer: &Informer<T>,
    replaced: impl Fn(Informer<T>) + Send + 'static,
) -> BoxStream<'static, Event<T>> {
    resubscribing(
        informer,
        move || cache.informer::<T>(&scope),
        move |new| replaced(new.clone()),
    )
}

impl<K: Typed> Source<K> for LabelSharded<K> {
    fn start(self: Box<Self>) -> Result<Started<K>, SourceError> {
        let base = self.cache.default_scopes::<K>();
        // Nothing is read from the default scopes (every object) from now on.
        self.cache.set_scopes::<K>(Vec::new());
        // Metadata is all the labelling needs: on a first start, when every object is
        // unlabelled, each replica lists them all once, but only their metadata.
        let unlabelled: Vec<(Scope, Informer<PartialObjectMeta<K>>)> = base
            .iter()
            .map(|scope| {
                let scope = narrowed(scope, &format!("!{}", self.label));
                let informer = self.cache.informer::<PartialObjectMeta<K>>(&scope)?;
                Ok::<_, rudder_cache::Error>((scope, informer))
            })
            .collect::<Result<_, _>>()?;
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let current = Arc::clone(&self.current);
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: the events stream holds it (AbortOnDropHandle), and the controller's watch task owns the stream and is joined"
        )]
        let task = tokio::spawn(self.run(base, unlabelled, events_tx));
        let events: BoxStream<'static, Event<K>> = futures::stream::unfold(
            (events_rx, AbortOnDropHandle::new(task)),
            |(mut rx, guard)| async { rx.recv().await.map(|event| (event, (rx, guard))) },
        )
        .boxed();
        let (probe, waiter) = (Arc::clone(&current), current);
        let synced = Synced::from_fn(
            move || {
                probe
                    .lock_unpoisoned()
                    .values()
                    .flatten()
                    .all(Informer::has_synced)
            },
            move || {
                let informers: Vec<Informer<K>> = waiter
                    .lock_unpoisoned()
                    .values()
                    .flatten()
                    .cloned()
                    .collect();
                Box::pin(async move {
                    for informer in informers {
                        if informer.wait_for_sync(Duration::MAX).await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                })
            },
        );
        Ok(Started::new(events, synced))
    }
}

impl<K: Typed> LabelSharded<K> {
    /// Follows the ring's held shards: starts and stops the shards' informers, forwards
    /// their events, and labels the objects of held shards that carry no (or a wrong) label.
    async fn run(
        mut self,
        base: Vec<Scope>,
        unlabelled: Vec<(Scope, Informer<PartialObjectMeta<K>>)>,
        events: mpsc::UnboundedSender<Event<K>>,
    ) {
        // As this starts (with the manager), when the recorder is installed: a description
        // given before then would be lost.
        metrics::describe_counter!(
            LABEL_ERRORS_TOTAL,
            "Total number of failed patches of an object's shard label, by ring."
        );
        let (to_label, labelling) = mpsc::unbounded_channel::<ToLabel>();
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: `run` holds it (AbortOnDropHandle), aborted when `run` ends"
        )]
        let labeller = AbortOnDropHandle::new(tokio::spawn(label_objects::<K>(
            self.client.clone(),
            self.label.clone(),
            self.ring.clone(),
            labelling,
        )));
        // The unlabelled informers of the moment (replacements included), for the pass below.
        let unlabelled_now: Arc<Mutex<Vec<Informer<PartialObjectMeta<K>>>>> = Arc::new(Mutex::new(
            unlabelled.iter().map(|(_, i)| i.clone()).collect(),
        ));
        let mut unlabelled_events = futures::stream::select_all(unlabelled.iter().enumerate().map(
            |(index, (scope, informer))| {
                let now = Arc::clone(&unlabelled_now);
                resilient(self.cache.clone(), scope.clone(), informer, move |new| {
                    if let Some(slot) = now.lock_unpoisoned().get_mut(index) {
                        *slot = new;
                    }
                })
            },
        ));
        let mut forwarders: BTreeMap<usize, Vec<AbortOnDropHandle<()>>> = BTreeMap::new();
        let mut held = BTreeSet::new();
        loop {
            let now: BTreeSet<usize> = self
                .status
                .borrow_and_update()
                .held
                .iter()
                .copied()
                .collect();
            if now != held {
                self.follow(&base, &held, &now, &mut forwarders, &events, &to_label)
                    .await;
                held = now;
                // Objects waiting for a label whose shard came here.
                let informers = unlabelled_now.lock_unpoisoned().clone();
                for object in informers.iter().flat_map(|i| i.store().list()) {
                    self.label_if_held(&object.metadata, &held, &to_label);
                }
            }
            tokio::select! {
                changed = self.status.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                event = unlabelled_events.next() => {
                    let object = match event {
                        Some(Event::Create { object, .. }) => object,
                        Some(Event::Update { new, .. }) => new,
                        Some(Event::Delete { .. } | Event::Generic { .. }) => continue,
                        // The cache is stopping.
                        None => break,
                    };
                    self.label_if_held(&object.metadata, &held, &to_label);
                }
            }
        }
        drop(forwarders);
        drop(labeller);
    }

    /// Sends an unlabelled object to be labelled if this replica holds its shard.
    fn label_if_held(
        &self,
        meta: &ObjectMeta,
        held: &BTreeSet<usize>,
        to_label: &mpsc::UnboundedSender<ToLabel>,
    ) {
        let Some(name) = meta.name.as_deref() else {
            return;
        };
        let shard = self
            .gate
            .shard_of(&Request::new(meta.namespace.as_deref(), name));
        if held.contains(&shard)
            && let Some(item) = ToLabel::new(meta, &self.label, shard)
        {
            let _ = to_label.send(item);
        }
    }

    /// Stops the informers of the shards no longer held and starts those of the shards now
    /// held, and points the cache's reads of `K` at them.
    async fn follow(
        &self,
        base: &[Scope],
        before: &BTreeSet<usize>,
        now: &BTreeSet<usize>,
        forwarders: &mut BTreeMap<usize, Vec<AbortOnDropHandle<()>>>,
        events: &mpsc::UnboundedSender<Event<K>>,
        to_label: &mpsc::UnboundedSender<ToLabel>,
    ) {
        let scopes = |shard: usize| -> Vec<Scope> {
            base.iter()
                .map(|scope| narrowed(scope, &format!("{}={shard}", self.label)))
                .collect()
        };
        let gone: Vec<usize> = before.difference(now).copied().collect();
        for &shard in &gone {
            forwarders.remove(&shard);
            self.current.lock_unpoisoned().remove(&shard);
        }
        let mut started = Vec::new();
        for &shard in now.difference(before) {
            let informers: Result<Vec<Informer<K>>, _> = scopes(shard)
                .iter()
                .map(|scope| self.cache.informer::<K>(scope))
                .collect();
            match informers {
                Ok(informers) => started.push((shard, informers)),
                Err(error) => {
                    // The cache is stopping: so is the controller.
                    tracing::debug!(ring = %self.ring, shard, %error, "no informer for a shard");
                }
            }
        }
        for (shard, informers) in started {
            self.current
                .lock_unpoisoned()
                .insert(shard, informers.clone());
            #[allow(
                clippy::disallowed_methods,
                reason = "owned: `run` holds each forwarder (AbortOnDropHandle) in `forwarders`, aborted when its shard goes or `run` ends"
            )]
            let tasks = scopes(shard)
                .into_iter()
                .zip(&informers)
                .enumerate()
                .map(|(index, (scope, informer))| {
                    let current = Arc::clone(&self.current);
                    let stream = resilient(self.cache.clone(), scope, informer, move |new| {
                        if let Some(slot) = current
                            .lock_unpoisoned()
                            .get_mut(&shard)
                            .and_then(|informers| informers.get_mut(index))
                        {
                            *slot = new;
                        }
                    });
                    AbortOnDropHandle::new(tokio::spawn(forward(
                        stream,
                        shard,
                        self.gate.clone(),
                        self.label.clone(),
                        events.clone(),
                        to_label.clone(),
                    )))
                })
                .collect();
            forwarders.insert(shard, tasks);
        }
        let reading: Vec<Scope> = self
            .current
            .lock_unpoisoned()
            .keys()
            .flat_map(|&s| scopes(s))
            .collect();
        self.cache.set_scopes::<K>(reading);
        for shard in gone {
            for scope in scopes(shard) {
                self.cache.remove_informer::<K>(&scope).await;
            }
        }
    }
}

/// Forwards the events of one shard's informer to the controller, as changes (queued at
/// the default priority, like the resync of a shard handed over), and sends objects whose
/// label names another shard than their key's to be labelled again.
async fn forward<K: Typed>(
    mut stream: BoxStream<'static, Event<K>>,
    shard: usize,
    gate: ShardGate,
    label: String,
    events: mpsc::UnboundedSender<Event<K>>,
    to_label: mpsc::UnboundedSender<ToLabel>,
) {
    while let Some(event) = stream.next().await {
        let event = match event {
            Event::Create { object, .. } => Event::Create {
                object,
                initial_list: false,
            },
            other => other,
        };
        if let Event::Create { object, .. } | Event::Update { new: object, .. } = &event
            && let Some(request) = Request::from_object(&**object)
        {
            let right = gate.shard_of(&request);
            if right != shard {
                tracing::warn!(%label, shard, right, object = %request,
                    "an object carries the wrong shard label; labelling it again");
                if let Some(item) = ToLabel::new(object.meta(), &label, right) {
                    let _ = to_label.send(item);
                }
            }
        }
        if events.send(event).is_err() {
            return;
        }
    }
}

/// Writes the shard label on each object sent (a merge patch of the label alone), a few at
/// a time; a failure is logged and counted, and the object is tried again at its next event
/// (an informer's periodic resync, or its shard coming here again).
async fn label_objects<K: Typed>(
    client: Client,
    label: String,
    ring: String,
    objects: mpsc::UnboundedReceiver<ToLabel>,
) {
    let objects = futures::stream::unfold(objects, |mut rx| async {
        rx.recv().await.map(|item| (item, rx))
    });
    objects
        .for_each_concurrent(LABEL_CONCURRENCY, |item| {
            let (client, label, ring) = (client.clone(), label.clone(), ring.clone());
            async move {
                let ToLabel {
                    name,
                    namespace,
                    has,
                    shard,
                } = item;
                if has == Some(shard.to_string()) {
                    return;
                }
                let api = <K::Scope as ApiScope>::api::<K>(client, namespace.as_deref());
                let patch = Patch::Merge(serde_json::json!({
                    "metadata": { "labels": { label.as_str(): shard.to_string() } }
                }));
                if let Err(error) = api.patch(&name, &PatchParams::default(), &patch).await {
                    let missing = matches!(&error, kube::Error::Api(s) if s.code == 404);
                    if !missing {
                        metrics::counter!(LABEL_ERRORS_TOTAL, "ring" => ring.clone()).increment(1);
                        tracing::warn!(%ring, %label, shard, object = %name, %error,
                            "cannot write the shard label");
                    }
                }
            }
        })
        .await;
}
