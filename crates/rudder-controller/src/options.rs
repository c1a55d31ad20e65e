//! [`Options`]: how a controller runs, one type for every builder that makes controllers.

use std::fmt;
use std::time::Duration;

use rudder_handler::Request;
use rudder_workqueue::RateLimiter;

/// How long `run` waits for every source to sync before giving up, unless told otherwise
/// (controller-runtime's default).
pub const DEFAULT_CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// How long in-flight reconciles get to finish after a stop that carries no deadline of its
/// own (a plain [`Controller::run`](crate::Controller::run) whose token is cancelled) before
/// their contexts are cancelled, unless told otherwise. Under a manager the manager's
/// deadline governs instead.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// How a controller runs: workers, timeouts, retries. Shared by
/// [`Controller::builder`](crate::Controller::builder) and the `rudder` facade's builder
/// (`with_options`), so each option is declared once.
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
pub struct Options {
    pub(crate) workers: usize,
    pub(crate) cache_sync_timeout: Duration,
    pub(crate) reconcile_timeout: Option<Duration>,
    pub(crate) shutdown_grace: Duration,
    pub(crate) recover_panic: bool,
    pub(crate) skip_name_validation: bool,
    pub(crate) rate_limiter: Option<Box<dyn RateLimiter<Request>>>,
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
        }
    }
}

impl Options {
    /// The defaults: one worker, [`DEFAULT_CACHE_SYNC_TIMEOUT`], no reconcile timeout,
    /// [`DEFAULT_SHUTDOWN_GRACE`], panics recovered, client-go's controller rate limiter.
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

    /// Cancels a reconcile's [`Context`](crate::Context) once it has run this long
    /// (default: never). The reconcile is not aborted: it should watch
    /// [`Context::cancelled`](crate::Context::cancelled) and return.
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
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<Request> + 'static) -> Self {
        self.rate_limiter = Some(Box::new(limiter));
        self
    }

    /// Allows a name another controller in the process has (tests that build the same
    /// controller twice). Metrics of the two are then mixed.
    pub fn skip_name_validation(mut self) -> Self {
        self.skip_name_validation = true;
        self
    }
}
