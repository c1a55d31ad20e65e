//! Catching panics in user code (index functions, transforms) so they cannot take a watch down.

use std::panic::{AssertUnwindSafe, catch_unwind};

use rudder_core::panic_message;

/// Runs `f`, turning a panic into its message.
///
/// `AssertUnwindSafe` is sound at every call site because each one hands `f` only a value
/// that is thrown away when `f` panics (a decoded object about to be transformed) or a shared
/// reference it can only read, and mutates nothing shared until `f` has returned; each call
/// site says which.
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| panic_message(&*payload))
}
