//! [`Options`]: how a controller runs, one type for every builder that makes controllers.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rudder_core::Request;
use rudder_workqueue::rate_limiter::RateLimiter;

/// How long `run` waits for every source to sync before giving up, unless told otherwise
/// (controller-runtime's default).
pub const DEFAULT_CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// How long in-flight reconciles get to finish after a stop that carries no deadline of its
/// own (a plain [`Controller::run`](crate::Controller::run) whose token is cancelled) before
/// their contexts are cancelled, unless told otherwise. Under a manager the manager's
/// deadline governs instead.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// The longest a key is held back for the cache to deliver the writes of its last
/// reconcile, unless told otherwise (controller-runtime's read-your-writes client waits 5 s
/// too); past it the key runs anyway, counted and logged.
pub const DEFAULT_WRITE_WAIT: Duration = Duration::from_secs(5);

/// How a controller runs: workers, timeouts, retries. Shared by
/// [`Controller::builder`](crate::Controller::builder) and the `rudder` facade's builders
/// (`with_options`), so each option is declared once.
///
/// Cloning gives the same settings. A rate limiter set with
/// [`rate_limiter`](Self::rate_limiter) is one limiter, shared by the clones (and by every
/// controller built from them, mixing their keys' backoff); one set with
/// [`rate_limiter_with`](Self::rate_limiter_with) is made afresh for each controller built.
///
/// ```
/// use std::time::Duration;
/// use rudder_controller::Options;
///
/// let options = Options::new()
///     .workers(4)
///     .reconcile_timeout(Duration::from_secs(30));
/// assert_eq!(options.worker_count(), 4);
/// ```
#[derive(Clone)]
pub struct Options {
    pub(crate) workers: usize,
    pub(crate) cache_sync_timeout: Duration,
    pub(crate) reconcile_timeout: Option<Duration>,
    pub(crate) shutdown_grace: Duration,
    pub(crate) recover_panic: bool,
    pub(crate) skip_name_validation: bool,
    pub(crate) rate_limiter: Option<Limiter>,
    pub(crate) read_your_writes: bool,
    pub(crate) write_wait: Duration,
    pub(crate) filter_own_echoes: bool,
    pub(crate) cluster: Option<Arc<str>>,
}

/// The rate limiter options give a controller.
#[derive(Clone)]
pub(crate) enum Limiter {
    /// One limiter, whoever builds from these options or their clones.
    One(Arc<dyn RateLimiter<Request>>),
    /// A limiter made for each controller built.
    Each(Arc<dyn Fn() -> Box<dyn RateLimiter<Request>> + Send + Sync>),
}

impl Limiter {
    /// The limiter for one controller being built.
    pub(crate) fn make(&self) -> Box<dyn RateLimiter<Request>> {
        match self {
            Self::One(limiter) => Box::new(Arc::clone(limiter)),
            Self::Each(make) => make(),
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("workers", &self.workers)
            .field("cache_sync_timeout", &self.cache_sync_timeout)
            .field("reconcile_timeout", &self.reconcile_timeout)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("recover_panic", &self.recover_panic)
            .field("skip_name_validation", &self.skip_name_validation)
            .field("rate_limiter", &self.rate_limiter.is_some())
            .field("read_your_writes", &self.read_your_writes)
            .field("write_wait", &self.write_wait)
            .field("filter_own_echoes", &self.filter_own_echoes)
            .field("cluster", &self.cluster)
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            workers: 1,
            cache_sync_timeout: DEFAULT_CACHE_SYNC_TIMEOUT,
            reconcile_timeout: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            recover_panic: true,
            skip_name_validation: false,
            rate_limiter: None,
            read_your_writes: true,
            write_wait: DEFAULT_WRITE_WAIT,
            filter_own_echoes: false,
            cluster: None,
        }
    }
}

impl Options {
    /// The defaults: one worker, [`DEFAULT_CACHE_SYNC_TIMEOUT`], no reconcile timeout,
    /// [`DEFAULT_SHUTDOWN_GRACE`], panics recovered, client-go's controller rate limiter,
    /// read-your-writes on with [`DEFAULT_WRITE_WAIT`], own echoes delivered.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many reconciles may run at once (default 1; 0 counts as 1). One request is never
    /// reconciled twice at once, whatever this is.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// The number of workers these options give.
    pub fn worker_count(&self) -> usize {
        self.workers
    }

    /// How long to wait for every source to sync (default [`DEFAULT_CACHE_SYNC_TIMEOUT`]).
    pub fn cache_sync_timeout(mut self, timeout: Duration) -> Self {
        self.cache_sync_timeout = timeout;
        self
    }

    /// Cancels a reconcile's [`Context`](rudder_core::Context) once it has run this long
    /// (default: never). The reconcile is not aborted: it should watch
    /// [`Context::cancelled`](rudder_core::Context::cancelled) and return.
    pub fn reconcile_timeout(mut self, timeout: Duration) -> Self {
        self.reconcile_timeout = Some(timeout);
        self
    }

    /// How long in-flight reconciles get after a stop that carries no deadline before their
    /// contexts are cancelled (default [`DEFAULT_SHUTDOWN_GRACE`]). A manager hands down its
    /// own deadline, which replaces this.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Whether a panicking reconcile is caught, logged, counted and retried with backoff
    /// (the default), or left to unwind (ending the worker and the controller's `run`).
    pub fn recover_panic(mut self, recover: bool) -> Self {
        self.recover_panic = recover;
        self
    }

    /// The rate limiter for retries (default: client-go's controller default, the longer of
    /// 5 ms doubling to 1000 s per request and 10 per second overall with bursts of 100).
    /// It is one limiter: clones of these options share it. For options that build several
    /// controllers (a fleet's, one per member cluster), give
    /// [`rate_limiter_with`](Self::rate_limiter_with) instead.
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<Request> + 'static) -> Self {
        self.rate_limiter = Some(Limiter::One(Arc::new(limiter)));
        self
    }

    /// The rate limiter for retries, made by `make` for each controller built from these
    /// options or their clones, so that each has its own (a fleet's instances, one per
    /// member cluster, never share a key's backoff).
    pub fn rate_limiter_with<L: RateLimiter<Request> + 'static>(
        mut self,
        make: impl Fn() -> L + Send + Sync + 'static,
    ) -> Self {
        self.rate_limiter = Some(Limiter::Each(Arc::new(move || Box::new(make()))));
        self
    }

    /// Whether the rate limiter is one shared by every controller built from these options
    /// (set with [`rate_limiter`](Self::rate_limiter)), rather than the default or one made
    /// per controller ([`rate_limiter_with`](Self::rate_limiter_with)).
    pub fn shares_rate_limiter(&self) -> bool {
        matches!(self.rate_limiter, Some(Limiter::One(_)))
    }

    /// Whether a key waits for the cache to deliver the writes of its last reconcile before
    /// it is reconciled again (default `true`; see
    /// [reading your own writes](crate#reading-your-own-writes)). Off, a reconcile may read a
    /// cache older than its own last write, as in controller-runtime and kube-runtime.
    pub fn read_your_writes(mut self, on: bool) -> Self {
        self.read_your_writes = on;
        self
    }

    /// The longest a key waits for its own writes, and a read inside a reconcile for a write
    /// still pending (default [`DEFAULT_WRITE_WAIT`]); past it the key runs anyway, counted in
    /// `rudder_controller_write_wait_timeouts_total` and logged with the objects named.
    pub fn write_wait(mut self, bound: Duration) -> Self {
        self.write_wait = bound;
        self
    }

    /// Drops the watch event that is exactly the echo of this controller's own write (the
    /// version a write of one of its reconciles returned, or the deletion it made), so a
    /// status update does not trigger a reconcile of its own (default `false`: every event
    /// is delivered). Other writers' changes, and newer versions, are always delivered. Best
    /// effort: an echo that reaches the predicates before the reconcile has processed its
    /// write's answer (on loopback the watch sometimes wins that race) is delivered. Needs
    /// read-your-writes on (the echo is known from the writes it records); the `rudder`
    /// facade's builder puts the filter (rudder-handler's `DropOwnEchoes`) on every typed
    /// watch it declares (`for_`, `owns`, `watches_kind`), not on sources of your own.
    pub fn filter_own_echoes(mut self, on: bool) -> Self {
        self.filter_own_echoes = on;
        self
    }

    /// Whether read-your-writes is on ([`read_your_writes`](Self::read_your_writes)).
    pub fn reads_your_writes(&self) -> bool {
        self.read_your_writes
    }

    /// Whether own echoes are dropped ([`filter_own_echoes`](Self::filter_own_echoes)).
    pub fn filters_own_echoes(&self) -> bool {
        self.read_your_writes && self.filter_own_echoes
    }

    /// The member cluster this controller serves, for a controller run once per cluster (the
    /// `rudder` facade's multi-cluster controllers set it): every reconcile's
    /// [`Context::cluster`](rudder_core::Context::cluster) carries it, the controller's and its
    /// queue's metrics carry a `cluster` label and its reconcile spans a `cluster` field, and
    /// its name need be unique only among the controllers serving that cluster.
    pub fn cluster(mut self, name: impl Into<Arc<str>>) -> Self {
        self.cluster = Some(name.into());
        self
    }

    /// The member cluster set with [`cluster`](Self::cluster).
    pub fn cluster_name(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// Allows a name another controller in the process has (tests that build the same
    /// controller twice). Metrics of the two are then mixed.
    pub fn skip_name_validation(mut self) -> Self {
        self.skip_name_validation = true;
        self
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rudder_workqueue::rate_limiter::default_controller_rate_limiter;

    use super::*;

    fn limiter(options: &Options) -> Box<dyn RateLimiter<Request>> {
        options.rate_limiter.as_ref().map_or_else(
            || Box::new(default_controller_rate_limiter()) as Box<_>,
            Limiter::make,
        )
    }

    #[test]
    fn clones_share_a_given_limiter_and_make_their_own_with_rate_limiter_with() {
        let key = Request::new(None, "k");
        let one = Options::new().rate_limiter(default_controller_rate_limiter());
        let clone = one.clone();
        assert!(clone.shares_rate_limiter());
        let (first, second) = (limiter(&one), limiter(&clone));
        first.when(&key);
        assert_eq!(second.num_requeues(&key), 1, "one limiter, shared");

        let made = Arc::new(AtomicUsize::new(0));
        let each = Options::new().rate_limiter_with({
            let made = Arc::clone(&made);
            move || {
                made.fetch_add(1, Ordering::SeqCst);
                default_controller_rate_limiter()
            }
        });
        assert!(!each.shares_rate_limiter());
        let clone = each.clone();
        let (first, second) = (limiter(&each), limiter(&clone));
        assert_eq!(made.load(Ordering::SeqCst), 2);
        first.when(&key);
        first.when(&key);
        assert_eq!(first.num_requeues(&key), 2);
        assert_eq!(second.num_requeues(&key), 0, "a limiter of its own");
        assert!(!Options::new().shares_rate_limiter());
    }
}
