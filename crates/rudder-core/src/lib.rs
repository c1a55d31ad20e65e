//! The contracts of Rudder: the traits and types a source, an event handler, a predicate, a
//! reconciler or a runnable is written against, and the helpers every Rudder crate shares.
//!
//! ```
//! use rudder_core::{ErrorChain, panic_message};
//!
//! let error = std::io::Error::other("connection refused");
//! assert_eq!(ErrorChain(&error).to_string(), "connection refused");
//! let payload = std::panic::catch_unwind(|| panic!("boom")).unwrap_err();
//! assert_eq!(panic_message(&*payload), "boom");
//! ```

pub mod error;
mod event;
pub mod sync;

pub use error::{BoxError, ErrorChain, panic_message};
pub use event::Event;
