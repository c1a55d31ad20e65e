//! [`LeaderGate`]: whether a controller's workers may take requests now, following how long
//! this replica's leadership is known to be valid.

use std::fmt;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

/// Whether a controller's workers may take requests from its queue: always (no leader
/// election), or only while this replica's leadership is known to be valid.
///
/// A gated controller follows a *validity* channel (a [`watch::Receiver`]): `Some(valid_until)`
/// means "leading, and sure of it until `valid_until`" (for a Lease: the send time of the
/// last successful acquire or renewal plus the lease duration), `None` means "not leading".
/// The gate is open exactly while the value is `Some(t)` and `now < t` on tokio's monotonic
/// clock ([`Instant::now`]), so it closes by itself when `t` passes, even if whoever sends
/// the values is late, stalled, or was frozen with the whole process (SIGSTOP, a VM pause):
/// a resumed process sees a `t` in the past and a closed gate before anything else runs.
///
/// A worker checks the gate at the moment it takes a request: it waits while the gate is
/// closed, leaves the queue as soon as it closes, and looks again at the clock once the
/// queue hands it a request; a request taken as the gate closed goes back to the queue (at
/// its priority) instead of to the reconciler. While closed, requests stay in the queue,
/// where each key waits at most once (the queue merges duplicates), and are processed when
/// the gate opens. Reconciles already running when the gate closes are not interrupted.
///
/// Cloning gives another handle on the same channel.
///
/// ```
/// use std::time::Duration;
/// use rudder_core::LeaderGate;
/// use tokio::sync::watch;
/// use tokio::time::Instant;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (validity, receiver) = watch::channel(None);
/// let gate = LeaderGate::new(receiver);
/// assert!(!gate.is_open());
/// validity.send_replace(Some(Instant::now() + Duration::from_secs(15)));
/// assert!(gate.is_open());
/// validity.send_replace(None);
/// assert!(!gate.is_open());
/// assert!(LeaderGate::always_open().is_open());
/// # }
/// ```
#[derive(Clone, Default)]
pub struct LeaderGate {
    /// `None`: always open.
    validity: Option<watch::Receiver<Option<Instant>>>,
}

impl fmt::Debug for LeaderGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.validity {
            None => f.write_str("LeaderGate(always open)"),
            Some(validity) => f
                .debug_tuple("LeaderGate")
                .field(&*validity.borrow())
                .finish(),
        }
    }
}

impl LeaderGate {
    /// A gate that is always open: what a controller has unless told otherwise, and what it
    /// needs without leader election.
    pub fn always_open() -> Self {
        Self { validity: None }
    }

    /// A gate open while `validity` holds `Some(t)` with `now < t`.
    pub fn new(validity: watch::Receiver<Option<Instant>>) -> Self {
        Self {
            validity: Some(validity),
        }
    }

    /// Whether this gate is [`always_open`](Self::always_open).
    pub fn is_always_open(&self) -> bool {
        self.validity.is_none()
    }

    /// Whether the gate is open now.
    pub fn is_open(&self) -> bool {
        self.is_open_at(Instant::now())
    }

    /// Whether the gate is open at `now`, judged by the latest value sent.
    pub fn is_open_at(&self, now: Instant) -> bool {
        match &self.validity {
            None => true,
            Some(validity) => validity.borrow().is_some_and(|until| now < until),
        }
    }

    /// Waits until the gate is open; returns at once if it is. It never returns if the gate
    /// is closed and the sender is gone.
    pub async fn opened(&mut self) {
        let Some(validity) = &mut self.validity else {
            return;
        };
        loop {
            let until = *validity.borrow_and_update();
            if until.is_some_and(|until| Instant::now() < until) {
                return;
            }
            if validity.changed().await.is_err() {
                // Closed for good: nothing will open it again.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits until the gate is closed: `valid_until` passes or `None` is sent. Returns at
    /// once if it is closed; never returns for an [`always_open`](Self::always_open) gate.
    pub async fn closed(&mut self) {
        let Some(validity) = &mut self.validity else {
            return std::future::pending().await;
        };
        loop {
            let Some(until) = *validity.borrow_and_update() else {
                return;
            };
            if Instant::now() >= until {
                return;
            }
            tokio::select! {
                biased;
                // Look again rather than return: a renewal may have moved the deadline just
                // as it passed (both ready at once, as after a freeze).
                () = sleep_until(until) => {}
                changed = validity.changed() => {
                    if changed.is_err() {
                        // No more values: the last one stands until it passes.
                        sleep_until(until).await;
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn closes_by_itself_when_the_validity_passes() {
        let (tx, rx) = watch::channel(None);
        let mut gate = LeaderGate::new(rx);
        let start = Instant::now();
        tx.send_replace(Some(start + Duration::from_secs(3)));
        assert!(gate.is_open());
        gate.closed().await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        assert!(!gate.is_open());
        assert!(!gate.is_open_at(start + Duration::from_secs(3)));
        assert!(gate.is_open_at(start + Duration::from_millis(2999)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_moves_the_closing_time() {
        let (tx, rx) = watch::channel(None);
        let mut gate = LeaderGate::new(rx);
        let start = Instant::now();
        tx.send_replace(Some(start + Duration::from_secs(3)));
        let renew = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            tx.send_replace(Some(Instant::now() + Duration::from_secs(3)));
            tx
        });
        gate.closed().await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        drop(renew.await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_sent_as_the_old_deadline_passes_keeps_it_open() {
        let (tx, rx) = watch::channel(None);
        let mut gate = LeaderGate::new(rx);
        let start = Instant::now();
        tx.send_replace(Some(start + Duration::from_secs(1)));
        let mut closed = Box::pin(gate.closed());
        assert!(futures::poll!(closed.as_mut()).is_pending());
        // The renewal and the old deadline are both there when the waiter is next polled.
        tx.send_replace(Some(start + Duration::from_secs(3)));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            futures::poll!(closed.as_mut()).is_pending(),
            "closed on a deadline that a renewal had moved"
        );
        closed.await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn none_closes_at_once() {
        let (tx, rx) = watch::channel(Some(Instant::now() + Duration::from_secs(60)));
        let mut gate = LeaderGate::new(rx);
        let start = Instant::now();
        let closer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tx.send_replace(None);
            tx
        });
        gate.closed().await;
        assert_eq!(start.elapsed(), Duration::from_millis(10));
        assert!(!gate.is_open());
        drop(closer.await);
    }

    #[tokio::test(start_paused = true)]
    async fn opened_waits_for_a_validity_in_the_future() {
        let (tx, rx) = watch::channel(None);
        let mut gate = LeaderGate::new(rx);
        let start = Instant::now();
        let opener = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            // Already past: still closed.
            tx.send_replace(Some(Instant::now()));
            tokio::time::sleep(Duration::from_secs(1)).await;
            tx.send_replace(Some(Instant::now() + Duration::from_secs(3)));
            tx
        });
        gate.opened().await;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert!(gate.is_open());
        drop(opener.await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_sender_leaves_the_last_value_standing() {
        let (tx, rx) = watch::channel(Some(Instant::now() + Duration::from_secs(3)));
        let mut gate = LeaderGate::new(rx);
        let start = Instant::now();
        drop(tx);
        assert!(gate.is_open());
        gate.closed().await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        let never = tokio::time::timeout(Duration::from_secs(3600), gate.opened()).await;
        assert!(never.is_err(), "a closed gate with no sender opened");
    }

    #[tokio::test(start_paused = true)]
    async fn always_open_never_closes() {
        let mut gate = LeaderGate::always_open();
        assert!(gate.is_always_open());
        assert!(gate.is_open());
        gate.opened().await;
        let closed = tokio::time::timeout(Duration::from_secs(3600), gate.closed()).await;
        assert!(closed.is_err());
    }
}
