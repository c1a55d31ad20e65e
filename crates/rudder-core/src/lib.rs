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

mod error;
mod event;
mod gate;
mod handler;
mod predicate;
mod reconcile;
mod request;
mod runnable;
mod shutdown;
mod source;
pub mod sync;

pub use error::{BoxError, ErrorChain, TerminalError, is_terminal, panic_message};
pub use event::Event;
pub use gate::LeaderGate;
pub use handler::{EventHandler, LOW_PRIORITY, Queue, enqueue};
pub use predicate::{And, Compose, MetaEvent, MetaPredicate, MetaPredicates, Not, Or, Predicate};
pub use reconcile::{Action, Context, Next, ReconcileId, Reconciler};
pub use request::Request;
pub use runnable::{Runnable, runnable};
pub use shutdown::Shutdown;
pub use source::{Source, SourceError, Started, Synced};
