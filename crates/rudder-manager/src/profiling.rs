//! CPU profiles on demand, in pprof's format: what Go's `net/http/pprof` serves and
//! controller-runtime's manager exposes on its `PprofBindAddress`.
//!
//! With the crate's `profiling` feature, [`ManagerBuilder::profiling_address`] serves
//!
//! | path | answer |
//! |---|---|
//! | `/debug/pprof/` | this list, as text |
//! | `/debug/pprof/profile?seconds=N` | a CPU profile of the whole process over `N` seconds (default 30, at most 300), sampled 100 times a second, as a pprof protobuf (`go tool pprof -top URL`, or save it and read it later) |
//!
//! on an address of its own, off by default. With secure metrics
//! ([`ManagerBuilder::secure_metrics`], `webhook` feature) the profiling server is served the
//! same way: HTTPS with the metrics certificate, behind the same TokenReview and
//! SubjectAccessReview, so a caller needs `get` on the non-resource URL
//! `/debug/pprof/profile` (a ClusterRole rule `nonResourceURLs: ["/debug/pprof/*"]`).
//! Without it the server is plain HTTP and answers anyone who reaches it: bind it to
//! loopback (`kubectl port-forward`) or keep it behind a NetworkPolicy.
//!
//! One profile runs at a time (a second request while one runs is `409 Conflict`, as a
//! sampling profiler is process-wide); a `seconds` that is not a whole number from 1 to 300
//! is `400 Bad Request`. The samples come from a `SIGPROF` timer and the stacks are read in
//! the signal handler (pprof-rs); symbols are resolved in the process, so the profile names
//! functions without the binary at hand.
//!
//! # Heap profiles
//!
//! The system allocator keeps no record of who allocated what, so heap profiles need
//! jemalloc's sampling profiler. With the `heap-profiling` feature the server also answers
//! `/debug/pprof/heap`: the memory in use at the moment of the request, by the stack that
//! allocated it, as a gzipped pprof protobuf (sample types `inuse_space`, bytes, as Go's
//! heap profile; symbols resolved in the process). jemalloc samples one allocation every
//! 2^`lg_prof_sample` bytes on average (2^19, 512 KiB, by default) and scales what it saw
//! up, so small allocations are seen statistically, not one by one. Two things are the
//! binary's, as only a binary can choose its allocator:
//!
//! ```ignore
//! // jemalloc as the process's allocator (built with its profiler by this feature):
//! #[global_allocator]
//! static ALLOC: rudder_manager::profiling::Jemalloc = rudder_manager::profiling::Jemalloc;
//! ```
//!
//! and the profiler turned on when the process starts, either in the environment
//! (`_RJEM_MALLOC_CONF=prof:true,prof_active:true,lg_prof_sample:19`, for example in the
//! Deployment), or in the binary:
//!
//! ```ignore
//! #[unsafe(export_name = "_rjem_malloc_conf")]
//! static MALLOC_CONF: &[u8] = b"prof:true,prof_active:true,lg_prof_sample:19\0";
//! ```
//!
//! A request the process cannot answer says which of the two is missing (`501 Not
//! Implemented`): the profiler off (`prof:true` not given when the process started: it
//! cannot be turned on later), or on but inactive (`prof_active:false`), or jemalloc not
//! the global allocator (an allocation the server makes does not reach it). jemalloc writes
//! each dump to a file before it is read: the process needs a writable temporary directory
//! (`TMPDIR`, `/tmp` by default; an `emptyDir` under a read-only root filesystem).
//! Dumps are taken one at a time (a second request while one is taken is `409 Conflict`);
//! a heap profile can be taken while a CPU profile runs. A binary that denies `unsafe_code`
//! allows it on the `_rjem_malloc_conf` static (`#[allow(unsafe_code)]`: exporting a symbol
//! is unsafe). The names carry jemalloc's `_rjem_` prefix, as tikv-jemallocator builds it;
//! a build that turns on its `unprefixed_malloc_on_supported_platforms` feature reads
//! `malloc_conf` and `MALLOC_CONF` instead.
//!
//! [`ManagerBuilder::profiling_address`]: crate::ManagerBuilder::profiling_address
//! [`ManagerBuilder::secure_metrics`]: crate::ManagerBuilder::secure_metrics

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The CPU profile's default length, as Go's.
pub const DEFAULT_SECONDS: u64 = 30;

/// The longest CPU profile served.
pub const MAX_SECONDS: u64 = 300;

/// Samples per second, as Go's CPU profiler takes them.
pub const FREQUENCY: i32 = 100;

/// jemalloc, for the binary to make its global allocator (`#[global_allocator]`) so that
/// `/debug/pprof/heap` can answer (see [the module](self#heap-profiles)): built with its
/// sampling profiler, which is off until the process starts with `prof:true`.
#[cfg(feature = "heap-profiling")]
#[cfg_attr(docsrs, doc(cfg(feature = "heap-profiling")))]
pub use tikv_jemallocator::Jemalloc;

/// What a profile request can get instead of a profile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// Another profile of the same kind is being taken.
    #[error("a profile of this kind is already being taken; try again when it is done")]
    Busy,
    /// `seconds` is not a whole number from 1 to [`MAX_SECONDS`].
    #[error("seconds must be a whole number from 1 to {MAX_SECONDS}, not {0:?}")]
    Seconds(String),
    /// The profiler could not start or report (its timer or signal handler refused, or
    /// jemalloc's dump could not be written or read).
    #[error("the profiler failed: {0}")]
    Profiler(String),
    /// The process cannot take a heap profile as it was started: what is missing.
    #[cfg(feature = "heap-profiling")]
    #[cfg_attr(docsrs, doc(cfg(feature = "heap-profiling")))]
    #[error("no heap profile: {0}")]
    HeapUnavailable(&'static str),
}

/// Whether a profile is being taken in this process: the sampling profiler is one per
/// process (a signal timer), so two managers in one process share it, and the second
/// request is a `409` whichever manager it reaches.
static BUSY: AtomicBool = AtomicBool::new(false);

/// Takes CPU profiles, one at a time in the process.
#[derive(Clone, Debug, Default)]
pub(crate) struct Profiler;

/// Marks the profiler free again when dropped (the request may be dropped mid-profile).
struct Taking;

impl Drop for Taking {
    fn drop(&mut self) {
        BUSY.store(false, Ordering::Release);
    }
}

/// The `seconds` of a query string (`seconds=N`), or the default.
pub(crate) fn seconds(query: Option<&str>) -> Result<u64, ProfileError> {
    let Some(value) = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("seconds="))
    else {
        return Ok(DEFAULT_SECONDS);
    };
    match value.parse::<u64>() {
        Ok(n) if (1..=MAX_SECONDS).contains(&n) => Ok(n),
        _ => Err(ProfileError::Seconds(value.to_owned())),
    }
}

impl Profiler {
    /// A CPU profile of the process over `seconds`, encoded as pprof's protobuf.
    pub(crate) async fn cpu(&self, seconds: u64) -> Result<Vec<u8>, ProfileError> {
        if BUSY.swap(true, Ordering::AcqRel) {
            return Err(ProfileError::Busy);
        }
        let _taking = Taking;
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(FREQUENCY)
            // Stacks that end in these are the unwinder's own or a signal trampoline's.
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .map_err(|error| ProfileError::Profiler(error.to_string()))?;
        tracing::info!(seconds, "taking a CPU profile");
        // The profile's length: the time to sample, not a wait for a condition.
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        // Resolving symbols and encoding can take a while on a large binary: off the
        // runtime's workers. The task is joined here (its result awaited).
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: awaited at once below; if the request is dropped first, the task still ends on its own when the encoding is done"
        )]
        let encoded = tokio::task::spawn_blocking(move || {
            let report = guard
                .report()
                .build()
                .map_err(|error| ProfileError::Profiler(error.to_string()))?;
            let profile = report
                .pprof()
                .map_err(|error| ProfileError::Profiler(error.to_string()))?;
            drop(guard);
            Ok(pprof::protos::Message::encode_to_vec(&profile))
        })
        .await;
        match encoded {
            Ok(result) => result,
            Err(error) => Err(ProfileError::Profiler(error.to_string())),
        }
    }
}

/// The index page.
#[cfg(not(feature = "heap-profiling"))]
pub(crate) const INDEX: &str = "Profiles:\n\
    /debug/pprof/profile?seconds=N  CPU profile over N seconds (default 30, at most 300), pprof protobuf\n";

/// The index page.
#[cfg(feature = "heap-profiling")]
pub(crate) const INDEX: &str = "Profiles:\n\
    /debug/pprof/profile?seconds=N  CPU profile over N seconds (default 30, at most 300), pprof protobuf\n\
    /debug/pprof/heap               memory in use by allocating stack (jemalloc's sampling profiler), gzipped pprof protobuf\n";

/// Why a heap profile cannot be taken: jemalloc's profiler was not turned on at start.
#[cfg(feature = "heap-profiling")]
const HEAP_OFF: &str = "jemalloc's profiler is off: start the process with \
    _RJEM_MALLOC_CONF=prof:true (or a `_rjem_malloc_conf` static in the binary); it cannot be \
    turned on later";

/// Why a heap profile cannot be taken: the profiler is on but sampling nothing.
#[cfg(feature = "heap-profiling")]
const HEAP_INACTIVE: &str = "jemalloc's profiler is on but inactive (prof_active:false): \
    start the process with prof_active:true";

/// Why a heap profile cannot be taken: the allocations are not jemalloc's.
#[cfg(feature = "heap-profiling")]
const HEAP_NOT_GLOBAL: &str = "jemalloc is not this process's global allocator, so it sees \
    none of its allocations: add `#[global_allocator] static ALLOC: \
    rudder_manager::profiling::Jemalloc = rudder_manager::profiling::Jemalloc;` to the binary";

#[cfg(feature = "heap-profiling")]
impl Profiler {
    /// A heap profile: what is in use now, by allocating stack, as pprof's gzipped protobuf.
    pub(crate) async fn heap(&self) -> Result<Vec<u8>, ProfileError> {
        // Reading the controls, writing the dump to a file, reading it back and resolving
        // symbols all block: off the runtime's workers, and joined here.
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: awaited at once below; if the request is dropped first, the task still ends on its own when the dump is read"
        )]
        let dumped = tokio::task::spawn_blocking(heap_now).await;
        match dumped {
            Ok(result) => result,
            Err(error) => Err(ProfileError::Profiler(error.to_string())),
        }
    }
}

/// [`Profiler::heap`]'s blocking part.
#[cfg(feature = "heap-profiling")]
fn heap_now() -> Result<Vec<u8>, ProfileError> {
    if !jemalloc_is_global() {
        return Err(ProfileError::HeapUnavailable(HEAP_NOT_GLOBAL));
    }
    let Some(ctl) = jemalloc_pprof::PROF_CTL.as_ref() else {
        return Err(ProfileError::HeapUnavailable(HEAP_OFF));
    };
    // One dump at a time (jemalloc's controls are process-wide); another asked for while
    // one is taken is refused, as a second CPU profile is, rather than queued on a
    // blocking thread.
    let Ok(mut ctl) = ctl.try_lock() else {
        return Err(ProfileError::Busy);
    };
    if !ctl.activated() {
        return Err(ProfileError::HeapUnavailable(HEAP_INACTIVE));
    }
    tracing::info!(
        sample_bytes = 1u64 << ctl.lg_sample(),
        "taking a heap profile"
    );
    ctl.dump_pprof()
        .map_err(|error| ProfileError::Profiler(format!("{error:#}")))
}

/// Whether an allocation through the global allocator reaches jemalloc: its count of the
/// bytes this thread allocated moves by the allocation's size if so.
#[cfg(feature = "heap-profiling")]
fn jemalloc_is_global() -> bool {
    const PROBE: usize = 64 << 10;
    // The counter is read through a `mallctl` call each time: an opaque call, so the read
    // after the allocation is not folded into the one before it.
    let allocated = || {
        tikv_jemalloc_ctl::thread::allocatedp::read()
            .ok()
            .map(tikv_jemalloc_ctl::thread::ThreadLocal::get)
    };
    let Some(before) = allocated() else {
        return false;
    };
    let probe = std::hint::black_box(Vec::<u8>::with_capacity(PROBE));
    let after = allocated().unwrap_or(before);
    drop(probe);
    after.wrapping_sub(before) >= PROBE as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two managers in one process each have a profiler; the process has one sampling
    /// profiler, so a request to the second while the first profiles is `Busy` (409), not a
    /// profiler failure (500).
    #[tokio::test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the test joins the task it spawns"
    )]
    async fn a_second_profile_in_the_process_is_busy_whichever_manager_it_reaches() {
        let (first, second) = (Profiler, Profiler);
        let taking = tokio::spawn(async move { first.cpu(1).await.map(|bytes| bytes.len()) });
        rudder_envtest::poll::until(
            "the first profile to start",
            Duration::from_secs(10),
            || BUSY.load(Ordering::Acquire),
        )
        .await;
        assert!(matches!(second.cpu(1).await, Err(ProfileError::Busy)));
        assert!(taking.await.unwrap().unwrap() > 0);
    }

    /// This test binary's allocator is the system's: a heap profile says jemalloc is not the
    /// global allocator (before anything else, as nothing else would help).
    #[cfg(feature = "heap-profiling")]
    #[tokio::test]
    async fn a_heap_profile_without_jemalloc_as_the_allocator_says_so() {
        let error = Profiler.heap().await.unwrap_err();
        assert!(
            matches!(error, ProfileError::HeapUnavailable(why) if why == HEAP_NOT_GLOBAL),
            "{error}"
        );
        assert!(error.to_string().contains("#[global_allocator]"), "{error}");
    }

    #[test]
    fn seconds_are_whole_and_bounded() {
        assert_eq!(seconds(None).unwrap(), DEFAULT_SECONDS);
        assert_eq!(seconds(Some("debug=1")).unwrap(), DEFAULT_SECONDS);
        assert_eq!(seconds(Some("seconds=5")).unwrap(), 5);
        assert_eq!(seconds(Some("debug=0&seconds=300")).unwrap(), 300);
        for bad in [
            "seconds=0",
            "seconds=301",
            "seconds=1.5",
            "seconds=-1",
            "seconds=",
        ] {
            assert!(
                matches!(seconds(Some(bad)), Err(ProfileError::Seconds(_))),
                "{bad}"
            );
        }
    }
}
