//! Catching panics in user code (index functions, transforms) so they cannot take a watch down.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `f`, turning a panic into its message.
///
/// `AssertUnwindSafe` is sound at every call site because each one hands `f` only a value
/// that is thrown away when `f` panics (a decoded object about to be transformed) or a shared
/// reference it can only read, and mutates nothing shared until `f` has returned; each call
/// site says which.
pub(crate) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| message(&*payload))
}

/// The message of a panic payload (`panic!` gives a `&str` or a `String`).
pub(crate) fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}
