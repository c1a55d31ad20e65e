//! Giving the memory of a released store back to the system.
//!
//! glibc's allocator returns freed memory to the system only from the top of its heap: after
//! an informer's objects are freed below allocations that live on (the client's buffers,
//! other informers' objects), their pages stay resident, and a process that removed an
//! informer of 50,000 objects kept its RSS as if it still held them (`cargo xtask
//! bench-informers`: 1.9x the RSS from before the informer was created, measured). Asking the
//! allocator with `malloc_trim(0)` returns every free page. It runs when the last handle to a
//! store of at least [`LARGE_STORE`] objects is dropped, on a blocking thread when a Tokio
//! runtime is there (it walks and locks each arena for a few milliseconds). With another
//! global allocator (jemalloc, mimalloc: they return memory themselves), or off glibc, it
//! finds little or nothing to do.

/// Stores with at least this many objects give their memory back when released.
pub(crate) const LARGE_STORE: usize = 1_000;

/// Asks the allocator to return its free pages to the system, off the async threads when it
/// can.
pub(crate) fn give_back_freed_memory() {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            // Detached: nothing waits for it, and a runtime shutting down may drop it.
            #[allow(
                clippy::disallowed_methods,
                reason = "not owned, by design: called from the drop of a store's last handle, \
                          which leaves no owner to join it; a few milliseconds of malloc_trim \
                          holding no state, that a runtime shutting down may skip"
            )]
            drop(runtime.spawn_blocking(trim));
        }
        Err(_) => {
            trim();
        }
    }
}

/// glibc's `malloc_trim(0)`: every arena's free pages back to the system; whether any were.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(
    unsafe_code,
    reason = "glibc's malloc_trim, measured: a released 50,000-object informer's RSS stays \
              resident without it (docs/benchmarks.md)"
)]
fn trim() -> bool {
    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    // SAFETY: `malloc_trim` takes no pointer and touches only the allocator's own free
    // lists, under the arenas' locks, like any allocation; glibc has had it since 2.0.
    let released = unsafe { malloc_trim(0) } != 0;
    tracing::debug!(
        released,
        "gave the memory of a released store back to the system"
    );
    released
}

/// Nothing to do off glibc: other allocators return memory themselves, or have no such call.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}
