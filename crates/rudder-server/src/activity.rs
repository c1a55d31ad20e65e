//! [`Activity`]: what a connection is doing, as far as its timeouts and shedding care, shared
//! by the connection's stream, service adapter and watchdog and by the accept loop's scan for
//! a connection to shed; and [`InFlight`], one request on it.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

// parking_lot's lock: no poisoning (nothing panics while holding it), and this crate
// serves HTTP without Kubernetes, so it does not take rudder-core's std-lock helpers.
use parking_lot::{Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

/// What a connection is doing, as far as its timeouts and shedding care. Shared by the stream
/// wrapper (bytes read and written), the service adapter (requests and responses) and the
/// watchdog, which run in the connection's task, and by the accept loop's scan for a
/// connection to shed, which takes the lock briefly and only at the cap.
#[derive(Debug)]
pub(crate) struct Activity {
    state: Mutex<State>,
    /// The server's wake-up for an accept loop waiting at the cap: rung when this connection
    /// becomes idle.
    changed: Arc<Notify>,
}

#[derive(Debug)]
struct State {
    /// Requests whose head was read and whose response has not been written to the end.
    in_flight: usize,
    /// When the connection last went idle (accepted, or its last response written).
    idle_since: Instant,
    /// When the head now being read began: set by the first byte read while idle (and when
    /// the handshake ends, so a client that sends nothing is bound by the header timeout too).
    head_since: Option<Instant>,
    /// Whether bytes read while idle start a request head (HTTP/1). On HTTP/2 they may be
    /// control frames (pings, settings): only the first request is bound by the header
    /// timeout, from the accept.
    heads_follow_reads: bool,
    /// The stream would not take all of what hyper wrote (the client is not reading): an
    /// answer may still be on its way out, so the connection is not shed.
    output_blocked: bool,
    /// The accept loop asked this connection to close for a new client.
    shed: bool,
    /// The connection's task, to wake when a shed is asked.
    shed_waker: Option<Waker>,
}

/// How [`Activity::idleness`] finds a connection, for shedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Idleness {
    /// A request is in flight (or its answer not yet out): never shed.
    Busy,
    /// Asked to shed, and not settled yet.
    Shedding,
    /// No request in flight since this instant.
    IdleSince(Instant),
}

/// Which timer is due next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Due {
    Header,
    Idle,
}

impl Activity {
    /// A connection accepted at `now`; `changed` is rung whenever it becomes idle.
    pub(crate) fn new(now: Instant, changed: Arc<Notify>) -> Self {
        Self {
            state: Mutex::new(State {
                in_flight: 0,
                idle_since: now,
                head_since: Some(now),
                heads_follow_reads: true,
                output_blocked: false,
                shed: false,
                shed_waker: None,
            }),
            changed,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The handshake is done: the header timeout runs from now. The idle spell that
    /// shedding looks at still runs from the accept.
    pub(crate) fn handshake_done(&self, http2: bool) {
        let mut state = self.state();
        state.head_since = Some(Instant::now());
        state.heads_follow_reads = !http2;
    }

    pub(crate) fn read_some(&self) {
        let mut state = self.state();
        if state.heads_follow_reads && state.in_flight == 0 && state.head_since.is_none() {
            state.head_since = Some(Instant::now());
        }
    }

    pub(crate) fn write_blocked(&self) {
        self.state().output_blocked = true;
    }

    pub(crate) fn flushed(&self) {
        let mut state = self.state();
        if state.output_blocked {
            state.output_blocked = false;
            if state.in_flight == 0 {
                self.changed.notify_one();
            }
        }
    }

    /// Whether the connection could be shed, and since when it has been idle.
    pub(crate) fn idleness(&self) -> Idleness {
        let state = self.state();
        if state.shed {
            Idleness::Shedding
        } else if state.in_flight > 0 || state.output_blocked {
            Idleness::Busy
        } else {
            Idleness::IdleSince(state.idle_since)
        }
    }

    /// Asks the connection's task to close; it decides in [`confirm_shed`](Self::confirm_shed)
    /// whether it still may.
    pub(crate) fn ask_to_shed(&self) {
        let waker = {
            let mut state = self.state();
            state.shed = true;
            state.shed_waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Ready once a shed has been asked.
    pub(crate) fn poll_shed(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.state();
        if state.shed {
            return Poll::Ready(());
        }
        match &mut state.shed_waker {
            Some(waker) => waker.clone_from(cx.waker()),
            None => state.shed_waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Settles an asked shed in the connection's own task, after hyper has read what
    /// arrived: `true` to close (still idle), `false` if a request came in first, which
    /// withdraws the shed.
    pub(crate) fn confirm_shed(&self) -> bool {
        let mut state = self.state();
        let idle = state.in_flight == 0 && !state.output_blocked;
        state.shed = idle;
        idle
    }

    /// A request's head was read; the returned guard ends it when dropped (with the
    /// response's body, or with the request if it is abandoned).
    pub(crate) fn request(self: &Arc<Self>) -> InFlight {
        let mut state = self.state();
        state.in_flight += 1;
        state.head_since = None;
        InFlight(Arc::clone(self))
    }

    pub(crate) fn next(&self, header: Duration, idle: Duration) -> Option<(Instant, Due)> {
        let state = self.state();
        if state.in_flight > 0 {
            None
        } else if let Some(since) = state.head_since {
            Some((since + header, Due::Header))
        } else {
            Some((state.idle_since + idle, Due::Idle))
        }
    }
}

/// One request in flight on a connection, until dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
            self.0.changed.notify_one();
        }
    }
}
