//! Errors every crate shares: [`BoxError`], [`TerminalError`] (a reconcile error not to
//! retry), [`ErrorChain`] and [`panic_message`].

use std::any::Any;
use std::error::Error as StdError;
use std::fmt;

/// Any error, boxed: what a reconciler's, a runnable's or a source's error is turned into
/// where its type no longer matters (logs, retries, the manager's stop).
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// A reconcile error that retrying cannot fix: the request is not requeued, but the error is
/// counted (`controller_runtime_terminal_reconcile_errors_total`) and logged.
///
/// Return it as the reconciler's error, or anywhere in its chain of sources (a variant of
/// your error type holding it as `#[source]`).
///
/// Its message is `terminal error`; what went wrong is its source, so a log line that prints
/// the chain ([`ErrorChain`]) says `terminal error: <cause>` with the cause once.
#[derive(Debug, thiserror::Error)]
#[error("terminal error")]
pub struct TerminalError {
    #[source]
    source: BoxError,
}

impl TerminalError {
    /// Wraps `source` as terminal.
    pub fn new(source: impl Into<BoxError>) -> Self {
        Self {
            source: source.into(),
        }
    }
}

/// Whether `error` or any error in its chain of sources is a [`TerminalError`].
pub fn is_terminal(error: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<TerminalError>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// Displays an error with its sources, `outer: inner: root`, so a log line (or a `main` that
/// reports its failure) says what failed underneath, not only the outermost context.
///
/// ```
/// use std::{error::Error, fmt};
///
/// #[derive(Debug)]
/// struct Outer(std::io::Error);
/// impl fmt::Display for Outer {
///     fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
///         f.write_str("cannot write the status")
///     }
/// }
/// impl Error for Outer {
///     fn source(&self) -> Option<&(dyn Error + 'static)> {
///         Some(&self.0)
///     }
/// }
///
/// let error = Outer(std::io::Error::other("409 Conflict"));
/// assert_eq!(
///     rudder_core::ErrorChain(&error).to_string(),
///     "cannot write the status: 409 Conflict"
/// );
/// ```
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn StdError + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The message of a caught panic's payload: `panic!` with a literal gives a `&str`, with
/// arguments a `String`; anything else (`std::panic::panic_any`) has no text to show.
///
/// ```
/// let payload = std::panic::catch_unwind(|| panic!("index {} out of range", 3)).unwrap_err();
/// assert_eq!(rudder_core::panic_message(&*payload), "index 3 out of range");
/// ```
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_without_text_is_named_as_such() {
        let payload: Box<dyn Any + Send> = Box::new(7_u32);
        assert_eq!(
            panic_message(&*payload),
            "a panic with a non-string payload"
        );
        let payload: Box<dyn Any + Send> = Box::new("literal");
        assert_eq!(panic_message(&*payload), "literal");
    }

    #[test]
    fn an_error_without_sources_is_its_own_message() {
        let error = std::io::Error::other("alone");
        assert_eq!(ErrorChain(&error).to_string(), "alone");
    }
}
