//! The elector: acquire the Lease, keep renewing it, release it or notice it is lost.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, ObjectMeta, PostParams};
use rudder_cache::watch::{self as engine, Event as WatchEvent};
use rudder_core::sync::LockExt;
use tokio::sync::{Mutex, Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout, timeout_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::config::{JITTER_FACTOR, LeaderElectionConfig};
use super::error::{ConfigError, Error, LeadershipLost, Result};
use super::random_u64;
use super::record::{self, Record, Sighting, View};

/// `leader_election_master_status{name}`: 1 while this process leads the Lease `name`, else 0
/// (client-go's gauge, set by the elector on every change of leadership).
pub const LEADER_ELECTION_MASTER_STATUS: &str = "leader_election_master_status";

/// Elects one leader among candidates sharing a `coordination.k8s.io/v1` Lease, with
/// client-go's rules, so Rudder and Go controllers can compete for the same Lease.
///
/// Call [`acquire`](Self::acquire); once it returns, this candidate leads and a task keeps
/// renewing the Lease until the token passed to `acquire` is cancelled, or until no renewal
/// succeeded within the renew deadline of the last successful one (or a renewal finds another
/// holder), which [`Leadership::lost`] reports. Work that needs leadership checks
/// [`validity`](Self::validity) as it starts.
///
/// Cloning gives another handle to the same candidate.
#[derive(Clone)]
pub struct LeaderElection {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElection")
            .field("config", &self.shared.config)
            .field("leading", &self.is_leader())
            .finish_non_exhaustive()
    }
}

impl LeaderElection {
    /// A candidate for the Lease named in `config`, talking to the API server through
    /// `client`. Nothing is sent until [`acquire`](Self::acquire).
    ///
    /// The gauge `leader_election_master_status{name="<lease name>"}` is not made here: it is
    /// set (to 0) when [`acquire`](Self::acquire) starts and on every change of leadership,
    /// each time through the `metrics` recorder current then, so a candidate made before the
    /// process installs its recorder still reports to it.
    ///
    /// # Errors
    ///
    /// The [`ConfigError`] of [`LeaderElectionConfig::validate`].
    pub fn new(client: kube::Client, config: LeaderElectionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let lease_duration_seconds = config
            .lease_duration_seconds()
            .ok_or(ConfigError::LeaseDurationTooLong(config.lease_duration()))?;
        Ok(Self {
            shared: Arc::new(Shared {
                api: Api::namespaced(client, config.lease_namespace()),
                lease_duration_seconds,
                config,
                leading: AtomicBool::new(false),
                validity: watch::Sender::new(None),
                observed: Mutex::new(Observed::default()),
                annotations: std::sync::Mutex::new(BTreeMap::new()),
            }),
        })
    }

    /// Annotations this candidate writes onto the Lease with each of its writes from now on
    /// (taking it, renewing it, releasing it): `Some(value)` sets `key`, `None` removes it.
    /// What a sharding ring hands over with a shard rides on them.
    pub fn annotate(&self, key: &str, value: Option<String>) {
        self.shared
            .annotations
            .lock_unpoisoned()
            .insert(key.to_owned(), value);
    }

    /// Stops writing `key` (neither setting nor removing it), as before [`annotate`](Self::annotate).
    pub fn forget_annotation(&self, key: &str) {
        self.shared.annotations.lock_unpoisoned().remove(key);
    }

    /// The annotation `key` of the Lease as it was when this candidate last took it from
    /// another holder (or from no holder), read before its own write changed it: what the
    /// previous holder left.
    pub async fn taken_over_annotation(&self, key: &str) -> Option<String> {
        let observed = self.shared.observed.lock().await;
        observed.taken_over.as_ref()?.get(key).cloned()
    }

    /// The settings.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.shared.config
    }

    /// This candidate's identity, as written in the Lease when it leads.
    pub fn identity(&self) -> &str {
        self.shared.config.identity()
    }

    /// Whether this candidate leads now: from a successful [`acquire`](Self::acquire) until
    /// leadership is lost, released, or its [`Leadership`] dropped.
    pub fn is_leader(&self) -> bool {
        self.shared.leading.load(Ordering::Acquire)
    }

    /// Until when this candidate's leadership is certain, as a value that changes.
    ///
    /// While this candidate leads, the value is `Some(t + lease_duration)`, where `t` is the
    /// moment (by the monotonic clock, [`tokio::time::Instant`]) the last successful request
    /// that acquired or renewed the Lease was *sent*, or, if that request wrote the same
    /// record as client-go sees it (times in whole seconds: renewals within one second), the
    /// moment the first request of those was sent. No other candidate can take the Lease over
    /// before that instant: any of them counts its lease duration from when it saw the record
    /// change, which is after that write was sent, and its own write carries the
    /// `resourceVersion`, so it cannot overtake a write it has not seen. The value is `None` while this candidate
    /// does not lead; it becomes `None` before a release is written, when leadership is lost
    /// (including when a renewal finds another holder), and when the [`Leadership`] is
    /// dropped.
    ///
    /// Work that needs leadership checks it at the moment it starts: it may start only while
    /// `Instant::now() < valid_until`. A process frozen (SIGSTOP, a VM pause) past that instant
    /// then starts nothing when it resumes, even before its renewing task has run and noticed
    /// that leadership was lost. The value passes by itself, without a new value being sent:
    /// compare it with the clock, do not only wait for changes.
    pub fn validity(&self) -> watch::Receiver<Option<Instant>> {
        self.shared.validity.subscribe()
    }

    /// Records `lease`, read elsewhere (a sharding ring lists its shard Leases), as an
    /// attempt's read would: the expiry clock restarts only if its record changed. Skipped
    /// while this candidate leads or an attempt holds the observation. A candidate that
    /// starts trying later then counts the lease duration from when the record was first
    /// seen unchanged, not from its own first read. It can only make expiry later than a
    /// fresh read would (a stale copy that differs restarts the clock), never earlier.
    pub(crate) fn observe(&self, lease: &Lease) {
        if self.is_leader() {
            return;
        }
        if let Ok(mut observed) = self.shared.observed.try_lock() {
            observed.read(lease);
        }
    }

    /// Waits until this candidate holds the Lease, then starts renewing it in a task.
    ///
    /// It tries at once, then after each retry period plus a random jitter of up to 1.2 retry
    /// periods (client-go's). A Lease held by another candidate is taken over only once it
    /// has not changed for its `leaseDurationSeconds`, judged by this process's clock from when
    /// it saw the change, never by the times written in it. Failed requests are logged and
    /// retried.
    ///
    /// Meanwhile, unless [`with_watch(false)`](LeaderElectionConfig::with_watch), it watches
    /// the Lease (a watch selecting its name) and tries at once when it sees it released (an
    /// empty holder) or deleted, without waiting for the next retry. The watch stops when this
    /// returns; its failures are retried with a backoff and never stop the polling.
    ///
    /// When `cancel` fires after this returns, the renewing task stops, first releasing the
    /// Lease if [`release_on_cancel`](LeaderElectionConfig::with_release_on_cancel) is set;
    /// cancel only once everything that needs leadership has stopped.
    ///
    /// A cancellation while waiting returns at once; during a request to the API server, once
    /// the request ends (bounded by the renew deadline), releasing the Lease if that request
    /// acquired it and release on cancel is set.
    ///
    /// # Errors
    ///
    /// [`Error::Cancelled`] if `cancel` fires before the Lease is acquired.
    pub async fn acquire(&self, cancel: CancellationToken) -> Result<Leadership> {
        let shared = &self.shared;
        tracing::info!(lease = %shared.key(), identity = %shared.config.identity(), "attempting to acquire the leader lease");
        // The series exists from the first campaign on, at 0 while this candidate waits.
        shared.report_status();
        let free = Arc::new(Notify::new());
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: `acquire` holds it (AbortOnDropHandle), aborted when it returns"
        )]
        let _watch = shared.config.watch().then(|| {
            AbortOnDropHandle::new(tokio::spawn(watch_for_free(
                Arc::clone(shared),
                Arc::clone(&free),
            )))
        });
        let acquired = loop {
            if cancel.is_cancelled() {
                return Err(shared.cancelled());
            }
            // An attempt is not interrupted by the cancellation: its write may reach the
            // server, and this candidate would then hold the Lease without knowing it.
            let attempt = timeout(
                shared.config.renew_deadline(),
                shared.try_acquire_or_renew(),
            )
            .await;
            match attempt {
                Ok(Attempt::Leading(..)) if cancel.is_cancelled() => {
                    if shared.config.release_on_cancel() {
                        shared.release().await;
                    }
                    return Err(shared.cancelled());
                }
                Ok(Attempt::Leading(written)) => {
                    shared.renewed(written);
                    break written.sent;
                }
                Ok(Attempt::HeldBy(holder)) => {
                    tracing::debug!(lease = %shared.key(), %holder, "the lease is held by another candidate");
                }
                Ok(Attempt::Failed(error)) if is_conflict(&error) => {
                    // Another candidate wrote the Lease first, as happens when several try
                    // a released Lease at once: nothing went wrong.
                    tracing::debug!(lease = %shared.key(), %error, "another candidate wrote the lease first");
                }
                Ok(Attempt::Failed(error)) => {
                    tracing::warn!(lease = %shared.key(), %error, "failed to acquire the lease");
                }
                Err(_) => {
                    tracing::warn!(lease = %shared.key(), "an attempt to acquire the lease timed out");
                }
            }
            let wait = jittered(shared.config.retry_period());
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(shared.cancelled()),
                () = free.notified() => {
                    tracing::debug!(lease = %shared.key(), "the lease was released or deleted, trying at once");
                }
                () = sleep(wait) => {}
            }
        };
        shared.set_leading(true);
        tracing::info!(lease = %shared.key(), identity = %shared.config.identity(), "acquired the leader lease");
        let lost = CancellationToken::new();
        // A renewing task that panics renews no more: that is leadership lost, and `lost()`
        // must say so, or the holder would go on leading while others take the Lease over.
        let on_panic = OnPanic(Some({
            let (shared, lost) = (Arc::clone(shared), lost.clone());
            move || {
                tracing::error!(lease = %shared.key(), "the lease renewing task panicked; leadership is lost");
                shared.set_leading(false);
                lost.cancel();
            }
        }));
        let renewing = keep_leading(Arc::clone(shared), acquired, cancel, lost.clone());
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: `Leadership` holds the handle: `finished` joins it, a drop aborts it"
        )]
        let task = tokio::spawn(async move {
            let _on_panic = on_panic;
            renewing.await
        });
        Ok(Leadership {
            shared: Arc::clone(shared),
            lost,
            task: Some(task),
        })
    }
}

/// Leadership held by a [`LeaderElection`], renewed by a task until the token given to
/// [`acquire`](LeaderElection::acquire) is cancelled or leadership is lost (see
/// [`lost`](Self::lost)).
///
/// Dropping it aborts the renewing task without releasing the Lease (as a killed process
/// would): the others take over once the lease expires. To stop cleanly, cancel the token and
/// await [`finished`](Self::finished).
pub struct Leadership {
    shared: Arc<Shared>,
    lost: CancellationToken,
    task: Option<JoinHandle<Result<(), LeadershipLost>>>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("lease", &self.shared.key())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// Completes when leadership is lost: no renewal succeeded within the renew deadline
    /// (counted from when the last successful one was sent, so a process frozen past it
    /// learns it at once when it resumes, without sending anything), a renewal found another
    /// candidate holding the Lease, or the renewing task panicked. Stop everything that needs
    /// leadership then, and exit the process.
    ///
    /// It never completes if leadership ends otherwise (cancellation, or this value being
    /// dropped); select it against your own shutdown signal.
    pub fn lost(&self) -> impl Future<Output = LeadershipLost> + Send + 'static {
        let token = self.lost.clone();
        let error = self.shared.lost();
        async move {
            token.cancelled().await;
            error
        }
    }

    /// Whether leadership has been lost (see [`lost`](Self::lost)).
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Waits for the renewing task to end: after the cancellation (and the release, if
    /// configured), or when leadership is lost.
    ///
    /// # Errors
    ///
    /// [`LeadershipLost`] if it ended because leadership was lost (see [`lost`](Self::lost)).
    pub async fn finished(mut self) -> Result<(), LeadershipLost> {
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match task.await {
            Ok(result) => result,
            Err(error) => {
                tracing::error!(lease = %self.shared.key(), %error, "the lease renewing task failed");
                self.shared.set_leading(false);
                Err(self.shared.lost())
            }
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            self.shared.set_leading(false);
        }
    }
}

/// What one candidate shares between its handles and its renewing task.
struct Shared {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    lease_duration_seconds: i32,
    leading: AtomicBool,
    /// See [`LeaderElection::validity`].
    validity: watch::Sender<Option<Instant>>,
    observed: Mutex<Observed>,
    /// See [`LeaderElection::annotate`].
    annotations: std::sync::Mutex<BTreeMap<String, Option<String>>>,
}

/// client-go's observed record and observed time, plus the Lease last read or written, whose
/// `resourceVersion` the next update carries.
#[derive(Default)]
struct Observed {
    sighting: Option<Sighting>,
    lease: Option<Lease>,
    /// The last record this candidate wrote, as client-go compares it, and when the first
    /// request that wrote that view was sent: others count their lease duration from no
    /// earlier than that.
    written: Option<(View, Instant)>,
    /// The Lease's annotations as read when this candidate last took it over, before its
    /// write (see [`LeaderElection::taken_over_annotation`]).
    taken_over: Option<BTreeMap<String, String>>,
}

impl Observed {
    /// Whether the observed record is unexpired: it changed less than its lease duration ago,
    /// by this process's clock.
    fn valid(&self, now: Instant) -> bool {
        self.sighting.as_ref().is_some_and(|s| s.valid(now))
    }

    /// The record last read or written.
    fn record(&self) -> Option<&Record> {
        self.sighting.as_ref().map(|s| &s.record)
    }

    fn held_by(&self, identity: &str) -> bool {
        self.record().is_some_and(|r| r.holder == identity)
    }

    /// Records a Lease this candidate just wrote with a request sent at `sent`, and returns
    /// when the others' clocks may have restarted for it: `sent`, unless the previous write
    /// looks the same to client-go, whose candidates then keep counting from that one's view.
    fn wrote(&mut self, lease: Lease, sent: Instant) -> Written {
        let record = Record::from_spec(lease.spec.as_ref());
        let view = record.view();
        let view_since = match &self.written {
            Some((previous, since)) if *previous == view => *since,
            _ => sent,
        };
        self.written = Some((view, view_since));
        self.sighting = Some(Sighting {
            record,
            since: Instant::now(),
        });
        self.lease = Some(lease);
        Written { sent, view_since }
    }

    /// Records a Lease just read, restarting the expiry clock only if the record changed.
    fn read(&mut self, lease: &Lease) -> Record {
        let record = Record::from_spec(lease.spec.as_ref());
        self.sighting = Some(Sighting::after(
            self.sighting.take(),
            record.clone(),
            Instant::now(),
        ));
        self.lease = Some(lease.clone());
        record
    }
}

/// The outcome of one attempt to acquire or renew.
enum Attempt {
    /// This candidate holds the Lease, freshly renewed.
    Leading(Written),
    /// Another candidate holds an unexpired Lease.
    HeldBy(String),
    /// A request failed (including a conflict: someone else wrote the Lease first).
    Failed(kube::Error),
}

/// A successful write of the Lease by this candidate.
#[derive(Clone, Copy, Debug)]
struct Written {
    /// When its request was sent: the renew deadline counts from here.
    sent: Instant,
    /// When the first request writing the same record, as client-go compares it, was sent:
    /// the validity counts from here (see [`Observed::wrote`]).
    view_since: Instant,
}

/// How a renewal round ended.
enum Renewal {
    /// Renewed by a request sent at this instant.
    Renewed(Instant),
    /// No renewal succeeded within the renew deadline.
    Failed,
    /// Another candidate holds the Lease.
    TakenOver,
    Cancelled,
}

impl Shared {
    fn key(&self) -> String {
        format!(
            "{}/{}",
            self.config.lease_namespace(),
            self.config.lease_name()
        )
    }

    fn set_leading(&self, leading: bool) {
        if !leading {
            self.invalidate();
        }
        self.leading.store(leading, Ordering::Release);
        self.report_status();
    }

    /// Sets `leader_election_master_status{name}` to whether this candidate leads, through
    /// the recorder current now: leadership changes rarely, so resolving the series each
    /// time costs nothing that matters, and no handle can outlive the recorder it was made
    /// with.
    fn report_status(&self) {
        let leading = self.leading.load(Ordering::Acquire);
        metrics::gauge!(
            LEADER_ELECTION_MASTER_STATUS,
            "name" => self.config.lease_name().to_owned()
        )
        .set(if leading { 1.0 } else { 0.0 });
    }

    /// Publishes the validity given by a successful acquire or renew request: a lease
    /// duration from when the others may have seen the record change (see [`Written`]).
    fn renewed(&self, written: Written) {
        let until = written.view_since + self.config.lease_duration();
        self.validity.send_if_modified(|valid| {
            // A slow answer must not move the validity back behind a later one.
            if valid.is_none_or(|v| v < until) {
                *valid = Some(until);
                true
            } else {
                false
            }
        });
    }

    /// Ends the validity: this candidate does not, or may no longer, lead.
    fn invalidate(&self) {
        self.validity
            .send_if_modified(|valid| valid.take().is_some());
    }

    fn cancelled(&self) -> Error {
        Error::Cancelled {
            namespace: self.config.lease_namespace().to_owned(),
            name: self.config.lease_name().to_owned(),
        }
    }

    fn lost(&self) -> LeadershipLost {
        LeadershipLost {
            namespace: self.config.lease_namespace().to_owned(),
            name: self.config.lease_name().to_owned(),
            identity: self.config.identity().to_owned(),
        }
    }

    /// The record this candidate writes when it takes the Lease now.
    fn fresh_record(&self) -> Record {
        let now = record::now();
        Record {
            holder: self.config.identity().to_owned(),
            lease_duration_seconds: self.lease_duration_seconds,
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            transitions: 0,
        }
    }

    /// client-go's `tryAcquireOrRenew`: one attempt to create, take over or renew the Lease.
    async fn try_acquire_or_renew(&self) -> Attempt {
        let identity = self.config.identity();
        let mut observed = self.observed.lock().await;

        // While leading with an unexpired record, update the Lease last written without
        // reading it first; if that fails (someone else wrote it), read it and try again.
        if observed.held_by(identity)
            && observed.valid(Instant::now())
            && let (Some(lease), Some(old)) = (observed.lease.clone(), observed.record().cloned())
        {
            let mut desired = self.fresh_record();
            desired.acquire_time = old.acquire_time.or(desired.acquire_time);
            desired.transitions = old.transitions;
            let sent = Instant::now();
            match self.update(lease, &desired).await {
                Ok(lease) => {
                    return Attempt::Leading(observed.wrote(lease, sent));
                }
                Err(error) => {
                    tracing::debug!(lease = %self.key(), %error, "renewing without a read failed, reading the lease");
                }
            }
        }

        let lease = match self.api.get_opt(self.config.lease_name()).await {
            Ok(lease) => lease,
            Err(error) => return Attempt::Failed(error),
        };
        let mut desired = self.fresh_record();
        let Some(lease) = lease else {
            let mut spec = LeaseSpec::default();
            desired.write_to(&mut spec);
            let mut lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name().to_owned()),
                    namespace: Some(self.config.lease_namespace().to_owned()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            self.annotate(&mut lease);
            observed.taken_over = Some(BTreeMap::new());
            let sent = Instant::now();
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(lease) => Attempt::Leading(observed.wrote(lease, sent)),
                Err(error) => Attempt::Failed(error),
            };
        };

        let old = observed.read(&lease);
        if !old.holder.is_empty() && old.holder != identity && observed.valid(Instant::now()) {
            return Attempt::HeldBy(old.holder);
        }
        if old.holder == identity {
            desired.acquire_time = old.acquire_time.or(desired.acquire_time);
            desired.transitions = old.transitions;
        } else {
            desired.transitions = old.transitions.saturating_add(1);
            observed.taken_over = Some(lease.metadata.annotations.clone().unwrap_or_default());
        }
        let sent = Instant::now();
        match self.update(lease, &desired).await {
            Ok(lease) => Attempt::Leading(observed.wrote(lease, sent)),
            Err(error) => Attempt::Failed(error),
        }
    }

    /// Writes `record` into `lease` and replaces it, which fails with a conflict if the Lease
    /// changed since `lease` was read.
    async fn update(&self, mut lease: Lease, record: &Record) -> kube::Result<Lease> {
        record.write_to(lease.spec.get_or_insert_with(LeaseSpec::default));
        self.annotate(&mut lease);
        self.api
            .replace(self.config.lease_name(), &PostParams::default(), &lease)
            .await
    }

    /// Sets and removes the annotations [`LeaderElection::annotate`] asked for on `lease`.
    fn annotate(&self, lease: &mut Lease) {
        let wanted = self.annotations.lock_unpoisoned();
        if wanted.is_empty() {
            return;
        }
        let annotations = lease.metadata.annotations.get_or_insert_default();
        for (key, value) in wanted.iter() {
            match value {
                Some(value) => {
                    annotations.insert(key.clone(), value.clone());
                }
                None => {
                    annotations.remove(key);
                }
            }
        }
    }

    /// One renewal round: try at once, then every retry period, until an attempt succeeds or
    /// the renew deadline passes. The deadline counts from `last`, when the last successful
    /// acquire or renew request was sent, not from when this round starts: a process that
    /// was frozen past it gives up at once, without sending anything.
    async fn renew(&self, cancel: &CancellationToken, last: Instant) -> Renewal {
        let retry = self.config.retry_period();
        let deadline = last + self.config.renew_deadline();
        loop {
            if Instant::now() >= deadline {
                return Renewal::Failed;
            }
            match timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Attempt::Leading(written)) => {
                    self.renewed(written);
                    return Renewal::Renewed(written.sent);
                }
                Ok(Attempt::HeldBy(holder)) => {
                    // Another candidate wrote the Lease and holds it unexpired: it took over,
                    // so this one leads no more; waiting out the renew deadline would only
                    // leave two candidates believing they lead.
                    // (The renewing task withdraws the validity as it ends.)
                    tracing::warn!(lease = %self.key(), %holder, "another candidate holds the lease");
                    return Renewal::TakenOver;
                }
                Ok(Attempt::Failed(error)) => {
                    tracing::warn!(lease = %self.key(), %error, "failed to renew the lease");
                }
                Err(_) => return Renewal::Failed,
            }
            if cancel.is_cancelled() {
                return Renewal::Cancelled;
            }
            let next = (Instant::now() + retry).min(deadline);
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Renewal::Cancelled,
                () = sleep_until(next) => {}
            }
        }
    }

    /// client-go's `release`: clears the holder, so others take over at their next attempt.
    async fn release(&self) {
        let mut observed = self.observed.lock().await;
        if !observed.held_by(self.config.identity()) {
            return;
        }
        let (Some(lease), Some(old)) = (observed.lease.clone(), observed.record().cloned()) else {
            return;
        };
        // Nothing may start on the strength of this leadership once the release can be seen.
        self.invalidate();
        let now = record::now();
        let released = Record {
            holder: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            transitions: old.transitions,
        };
        let sent = Instant::now();
        match timeout(self.config.renew_deadline(), self.update(lease, &released)).await {
            Ok(Ok(lease)) => {
                observed.wrote(lease, sent);
                tracing::info!(lease = %self.key(), identity = %self.config.identity(), "released the leader lease");
            }
            Ok(Err(error)) => {
                tracing::warn!(lease = %self.key(), %error, "failed to release the lease; the others take over once it expires");
            }
            Err(_) => {
                tracing::warn!(lease = %self.key(), "releasing the lease timed out; the others take over once it expires");
            }
        }
    }
}

/// The renewing task: renew every retry period until cancelled (then release if configured)
/// or until no renewal succeeded within the renew deadline of the last successful one, sent at
/// `last` (then signal the loss).
async fn keep_leading(
    shared: Arc<Shared>,
    mut last: Instant,
    cancel: CancellationToken,
    lost: CancellationToken,
) -> Result<(), LeadershipLost> {
    loop {
        // Never sleep past the renew deadline: a renewal that answered late leaves less than
        // a retry period, and the loss must be seen when the deadline passes, not later.
        let next = (Instant::now() + shared.config.retry_period())
            .min(last + shared.config.renew_deadline());
        tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            () = sleep_until(next) => {}
        }
        let renewal = shared.renew(&cancel, last).await;
        match renewal {
            Renewal::Renewed(sent) => {
                last = sent;
                tracing::trace!(lease = %shared.key(), "renewed the leader lease");
            }
            Renewal::Cancelled => break,
            Renewal::Failed | Renewal::TakenOver => {
                shared.set_leading(false);
                tracing::error!(
                    lease = %shared.key(),
                    identity = %shared.config.identity(),
                    renew_deadline = ?shared.config.renew_deadline(),
                    since_last_renewal = ?last.elapsed(),
                    "leadership lost: {}",
                    if matches!(renewal, Renewal::TakenOver) {
                        "another candidate holds the lease"
                    } else {
                        "no renewal succeeded within the renew deadline"
                    }
                );
                lost.cancel();
                return Err(shared.lost());
            }
        }
    }
    if shared.config.release_on_cancel() {
        shared.release().await;
    }
    shared.set_leading(false);
    tracing::info!(lease = %shared.key(), identity = %shared.config.identity(), "stopped leading");
    Ok(())
}

/// Watches the Lease (a consistent list and watch selecting its name, on rudder-cache's
/// list/watch engine with its backoff) and wakes the acquire loop whenever it is seen free: released (an empty
/// holder), deleted, or absent when listed. A permit is kept if the loop is busy with an
/// attempt, so a release seen meanwhile is not missed.
async fn watch_for_free(shared: Arc<Shared>, free: Arc<Notify>) {
    let config =
        engine::Config::default().fields(&format!("metadata.name={}", shared.config.lease_name()));
    let events = engine::watch(shared.api.clone(), config);
    let mut events = std::pin::pin!(events);
    let mut listed = false;
    let mut failing = false;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => {
                failing = false;
                event
            }
            Err(error) => {
                // The first failure in a row is worth a warning (missing RBAC, typically);
                // the retries after it, with their backoff, are not.
                if failing {
                    tracing::debug!(lease = %shared.key(), %error, "watching the lease failed again");
                } else {
                    tracing::warn!(lease = %shared.key(), %error, "watching the lease failed; polling it meanwhile");
                }
                failing = true;
                continue;
            }
        };
        let is_free = match event {
            WatchEvent::Init => {
                listed = false;
                false
            }
            WatchEvent::InitApply(lease) => {
                listed = true;
                is_released(&lease)
            }
            WatchEvent::InitDone => !listed,
            WatchEvent::Apply(lease) => is_released(&lease),
            WatchEvent::Delete(_) => true,
        };
        if is_free {
            free.notify_one();
        }
    }
}

/// Whether the Lease names no holder (never held, or released), read as an attempt reads it.
fn is_released(lease: &Lease) -> bool {
    Record::from_spec(lease.spec.as_ref()).is_free()
}

/// Whether the API server refused a write because the object changed since it was read.
fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// `period` plus a random part of up to [`JITTER_FACTOR`] periods, as client-go's
/// `wait.Jitter`.
fn jittered(period: Duration) -> Duration {
    let fraction = (random_u64() >> 11) as f64 / (1u64 << 53) as f64;
    period + period.mul_f64(fraction * JITTER_FACTOR)
}

/// Runs its function if dropped while the thread panics (a task's future is dropped while
/// unwinding when the task panics), not on a normal end or an abort.
struct OnPanic<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for OnPanic<F> {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(f) = self.0.take()
        {
            f();
        }
    }
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::super::fake::FakeApi;
    use super::*;

    const LEASE: Duration = Duration::from_secs(3);
    const RENEW: Duration = Duration::from_secs(2);
    const LATENCY: Duration = Duration::from_millis(300);

    fn election(fake: &FakeApi, identity: &str) -> LeaderElection {
        let config = LeaderElectionConfig::new("default", "lock")
            .with_identity(identity)
            .with_lease_duration(LEASE)
            .with_renew_deadline(RENEW)
            .with_retry_period(Duration::from_millis(500))
            .with_release_on_cancel(true);
        let election = LeaderElection::new(fake.client(), config).unwrap();
        fake.observe(election.validity());
        election
    }

    /// The writes the fake saw.
    fn writes(fake: &FakeApi) -> Vec<super::super::fake::Seen> {
        fake.seen()
            .into_iter()
            .filter(|s| s.method == Method::POST || s.method == Method::PUT)
            .collect()
    }

    /// The last write the fake saw.
    fn last_write(fake: &FakeApi) -> super::super::fake::Seen {
        writes(fake).pop().unwrap()
    }

    /// When the first of the last writes that all wrote the same whole second was sent: what
    /// a client-go candidate counts its lease duration from, at the earliest.
    fn view_since(fake: &FakeApi) -> Instant {
        let writes = writes(fake);
        let last = writes.last().unwrap().wrote_renew_second;
        writes
            .iter()
            .rev()
            .take_while(|w| w.wrote_renew_second == last)
            .last()
            .unwrap()
            .at
    }

    #[tokio::test(start_paused = true)]
    async fn validity_runs_a_lease_duration_from_when_the_last_write_was_sent() {
        let fake = FakeApi::default();
        fake.set_latency(LATENCY);
        let election = election(&fake, "a");
        let mut validity = election.validity();
        assert_eq!(*validity.borrow_and_update(), None, "not leading yet");

        let stop = CancellationToken::new();
        let leadership = election.acquire(stop.clone()).await.unwrap();
        let create = last_write(&fake);
        assert_eq!(create.method, Method::POST);
        // Counted from the send, not from the answer a latency later.
        assert_eq!(Instant::now(), create.at + LATENCY);
        assert_eq!(*validity.borrow_and_update(), Some(create.at + LEASE));

        for _ in 0..3 {
            validity.changed().await.unwrap();
            let renewal = last_write(&fake);
            assert_eq!(renewal.method, Method::PUT);
            assert_eq!(renewal.wrote_holder.as_deref(), Some("a"));
            assert_eq!(*validity.borrow_and_update(), Some(renewal.at + LEASE));
            assert!(renewal.validity.flatten().is_some(), "valid while renewing");
        }

        stop.cancel();
        leadership.finished().await.unwrap();
        assert_eq!(*validity.borrow(), None);
        let release = last_write(&fake);
        assert_eq!(release.wrote_holder.as_deref(), Some(""));
        assert_eq!(
            release.validity,
            Some(None),
            "the validity ends before the release is sent"
        );
        assert_eq!(fake.holder().as_deref(), Some(""));
    }

    /// client-go compares records with their times in whole seconds: a renewal within the
    /// second of the previous write does not restart a client-go candidate's clock, so it
    /// must not extend this leader's validity either.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_within_the_second_of_the_last_write_keeps_its_validity() {
        let fake = FakeApi::default();
        fake.set_latency(LATENCY);
        let election = election(&fake, "a");
        let validity = election.validity();
        let stop = CancellationToken::new();
        let leadership = election.acquire(stop.clone()).await.unwrap();
        // The create is sent at a whole second (the tests' wall clock starts at one); the
        // first renewal 0.8 s later, the second 1.6 s later.
        let create = last_write(&fake);
        while writes(&fake).len() < 3 {
            sleep(Duration::from_millis(50)).await;
        }
        let all = writes(&fake);
        let (first, second) = (&all[1], &all[2]);
        assert_eq!(first.wrote_renew_second, create.wrote_renew_second);
        assert_eq!(first.at, create.at + Duration::from_millis(800));
        assert_ne!(second.wrote_renew_second, first.wrote_renew_second);
        assert_eq!(second.at, create.at + Duration::from_millis(1600));
        // Between the two renewals, the validity still counted from the create.
        assert_eq!(first.validity, Some(Some(create.at + LEASE)));
        assert_eq!(second.validity, Some(Some(create.at + LEASE)));
        // Once the second is answered, from the second renewal.
        sleep(LATENCY).await;
        assert_eq!(*validity.borrow(), Some(second.at + LEASE));
        stop.cancel();
        leadership.finished().await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn failing_renewals_are_a_loss_exactly_at_the_renew_deadline_of_the_last_success() {
        let fake = FakeApi::default();
        fake.set_latency(LATENCY);
        let election = election(&fake, "a");
        let validity = election.validity();
        let leadership = election.acquire(CancellationToken::new()).await.unwrap();
        // Let two renewals succeed, then make the API server fail every request.
        let mut renewals = election.validity();
        renewals.changed().await.unwrap();
        renewals.changed().await.unwrap();
        fake.set_failing(true);
        let last = last_write(&fake);
        assert_eq!(*validity.borrow(), Some(view_since(&fake) + LEASE));
        let failures_from = fake.seen().len();

        let lost = leadership.lost().await;
        assert_eq!(lost.identity, "a");
        assert_eq!(
            Instant::now(),
            last.at + RENEW,
            "lost exactly at the renew deadline counted from the last successful send"
        );
        assert_eq!(*validity.borrow(), None);
        assert!(!election.is_leader());
        let failed = fake.seen().len() - failures_from;
        assert!(
            failed >= 3,
            "renewals were retried until the deadline ({failed})"
        );
        assert!(leadership.finished().await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_frozen_past_its_lease_sees_the_loss_at_once_and_sends_nothing() {
        let fake = FakeApi::default();
        let election = election(&fake, "a");
        let validity = election.validity();
        let leadership = election.acquire(CancellationToken::new()).await.unwrap();
        let mut renewals = election.validity();
        renewals.changed().await.unwrap();
        let last = last_write(&fake);
        let sent_before = fake.seen().len();

        // The process is frozen for 10 s: the clock jumps and every timer fires only after.
        tokio::time::advance(Duration::from_secs(10)).await;
        let resumed = Instant::now();
        // Before the renewing task has run, the validity already forbids any new work.
        let valid_until = validity.borrow().expect("not yet withdrawn");
        assert_eq!(valid_until, view_since(&fake) + LEASE);
        assert!(valid_until <= last.at + LEASE);
        assert!(resumed >= valid_until);

        let lost = leadership.lost().await;
        assert_eq!(lost.identity, "a");
        assert_eq!(Instant::now(), resumed, "the loss is seen at once");
        assert_eq!(*validity.borrow(), None);
        assert_eq!(
            fake.seen().len(),
            sent_before,
            "no request was sent after resuming"
        );
        assert!(leadership.finished().await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_watch_backs_off_and_polling_still_takes_an_expired_lease_over() {
        let fake = FakeApi::default();
        fake.write_holder("b", 3);
        let election = election(&fake, "a");
        let started = Instant::now();
        let leadership = election.acquire(CancellationToken::new()).await.unwrap();
        let took = started.elapsed();
        // Polling: the record is seen at the start, so it expires 3 s later and is taken
        // over at the first retry after that (retries 0.5 s to 1.1 s apart).
        assert!(
            took >= LEASE && took <= LEASE + Duration::from_millis(1100),
            "{took:?}"
        );
        assert_eq!(fake.holder().as_deref(), Some("a"));
        let watches: Vec<Instant> = fake
            .seen()
            .into_iter()
            .filter(|s| s.list_or_watch)
            .map(|s| s.at)
            .collect();
        assert!(!watches.is_empty(), "the watch was tried");
        assert!(
            watches.len() <= 4,
            "the failing watch backs off (tried {} times in {took:?})",
            watches.len()
        );
        drop(leadership);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_finds_another_holder_is_a_loss_at_once() {
        let fake = FakeApi::default();
        let election = election(&fake, "a");
        let validity = election.validity();
        let leadership = election.acquire(CancellationToken::new()).await.unwrap();
        assert!(validity.borrow().is_some());

        // Another candidate overwrites the Lease (as a forced takeover would); the next
        // renewal, without a read, conflicts, reads the Lease and finds it held.
        fake.write_holder("b", 3);
        let written = Instant::now();
        let lost = leadership.lost().await;
        assert_eq!(lost.identity, "a");
        assert!(
            Instant::now() < written + Duration::from_millis(1100),
            "lost at the first renewal, not at the renew deadline"
        );
        assert_eq!(*validity.borrow(), None);
        assert!(!election.is_leader());
        assert_eq!(fake.holder().as_deref(), Some("b"));
        assert!(leadership.finished().await.is_err());
    }

    #[tokio::test]
    async fn a_panicking_task_runs_its_on_panic_and_an_ending_one_does_not() {
        let token = CancellationToken::new();
        let guard = OnPanic(Some({
            let token = token.clone();
            move || token.cancel()
        }));
        let ended = tokio::spawn(async move {
            let _guard = guard;
        });
        ended.await.unwrap();
        assert!(!token.is_cancelled(), "a normal end is no loss");

        let guard = OnPanic(Some({
            let token = token.clone();
            move || token.cancel()
        }));
        let aborted = tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        aborted.abort();
        assert!(aborted.await.unwrap_err().is_cancelled());
        assert!(!token.is_cancelled(), "an abort is no loss");

        let guard = OnPanic(Some({
            let token = token.clone();
            move || token.cancel()
        }));
        let panicked = tokio::spawn(async move {
            let _guard = guard;
            panic!("renewal bug");
        });
        assert!(panicked.await.unwrap_err().is_panic());
        assert!(token.is_cancelled(), "a panic is leadership lost");
    }

    #[test]
    fn jitter_stays_within_client_gos_bounds() {
        let period = Duration::from_millis(500);
        for _ in 0..1000 {
            let wait = jittered(period);
            assert!(wait >= period && wait <= period.mul_f64(1.0 + JITTER_FACTOR));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_observed_record_expires_by_the_local_clock() {
        let mut observed = Observed::default();
        let lease = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some("other".into()),
                lease_duration_seconds: Some(3),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        };
        observed.read(&lease);
        assert!(observed.valid(Instant::now()));
        tokio::time::advance(Duration::from_millis(2900)).await;
        // Reading the same record again does not restart the clock.
        observed.read(&lease);
        assert!(observed.valid(Instant::now()));
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(!observed.valid(Instant::now()));
    }
}
