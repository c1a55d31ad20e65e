//! The queue's time: nanoseconds since its epoch, which the ready queue, the state and the
//! handle all compare and store.

/// Nanoseconds since the queue's epoch: the queue's clock, cheap to compare and store.
pub(crate) type Nanos = u64;
