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
//! functions without the binary at hand. Heap profiles are not served: the system
//! allocator keeps no record of who allocated what.
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

/// What a profile request can get instead of a profile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// Another profile is being taken.
    #[error("a CPU profile is already being taken; try again when it is done")]
    Busy,
    /// `seconds` is not a whole number from 1 to [`MAX_SECONDS`].
    #[error("seconds must be a whole number from 1 to {MAX_SECONDS}, not {0:?}")]
    Seconds(String),
    /// The profiler could not start or report (its timer or signal handler refused).
    #[error("the profiler failed: {0}")]
    Profiler(String),
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
pub(crate) const INDEX: &str = "Profiles:\n\
    /debug/pprof/profile?seconds=N  CPU profile over N seconds (default 30, at most 300), pprof protobuf\n";

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
