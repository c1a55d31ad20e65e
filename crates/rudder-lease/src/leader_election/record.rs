//! The leader election record as client-go reads and writes it in a Lease's spec.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// A record as this process saw it, and when it last saw it change: client-go's expiry rule
/// judges a Lease by the local clock from that moment, never by the times written in it.
#[derive(Clone, Debug)]
pub(crate) struct Sighting {
    /// The record last read or written.
    pub(crate) record: Record,
    /// When this process saw it change (or wrote it).
    pub(crate) since: tokio::time::Instant,
}

impl Sighting {
    /// `record` seen at `now`, after `previous`: the clock restarts only if the record
    /// changed.
    pub(crate) fn after(
        previous: Option<Sighting>,
        record: Record,
        now: tokio::time::Instant,
    ) -> Sighting {
        match previous {
            Some(previous) if previous.record == record => previous,
            _ => Sighting { record, since: now },
        }
    }

    /// Whether the record is unexpired at `now`: it changed less than its lease duration
    /// before.
    pub(crate) fn valid(&self, now: tokio::time::Instant) -> bool {
        now < self.since + self.record.lease_duration()
    }
}

/// client-go's `LeaderElectionRecord`, the part of a Lease that leader election uses.
///
/// Reading, this process compares two records field by field, times to the microsecond, to
/// tell whether the Lease changed since it was last seen. client-go compares the records as it
/// serialises them, times in whole seconds ([`View`]): two renewals within one second look
/// unchanged to it. Comparing finer only restarts the expiry clock more often, so a Rudder
/// candidate takes over no earlier than client-go would. Writing, the difference matters: a
/// renewal that client-go cannot tell from the previous one does not restart its clock, so a
/// leader counts its validity from the first write of the same [`View`] (see
/// `Shared::renewed` in the elector).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// The holder; empty when nobody holds the Lease (never held, or released).
    pub(crate) holder: String,
    /// How long, after last seeing the record change, others wait before taking over.
    pub(crate) lease_duration_seconds: i32,
    /// When the holder took the Lease over.
    pub(crate) acquire_time: Option<MicroTime>,
    /// When the holder last renewed.
    pub(crate) renew_time: Option<MicroTime>,
    /// How many times the Lease changed hands.
    pub(crate) transitions: i32,
}

impl Record {
    /// Reads the record from a Lease's spec; absent fields read as client-go reads them
    /// (empty holder, zero duration and transitions).
    pub(crate) fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(spec) = spec else {
            return Self::empty();
        };
        Self {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            acquire_time: spec.acquire_time.clone(),
            renew_time: spec.renew_time.clone(),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    /// How long others wait, after last seeing this record change, before taking the Lease
    /// over (a negative `leaseDurationSeconds` reads as zero: expired at once).
    pub(crate) fn lease_duration(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.lease_duration_seconds).unwrap_or(0))
    }

    /// Whether the record names no holder (never held, or released).
    pub(crate) fn is_free(&self) -> bool {
        self.holder.is_empty()
    }

    fn empty() -> Self {
        Self {
            holder: String::new(),
            lease_duration_seconds: 0,
            acquire_time: None,
            renew_time: None,
            transitions: 0,
        }
    }

    /// The record as client-go serialises it to compare: times in whole seconds (a
    /// `metav1.Time` is written in RFC 3339 without fractions).
    pub(crate) fn view(&self) -> View {
        let second = |t: &Option<MicroTime>| t.as_ref().map(|t| t.0.as_second());
        View {
            holder: self.holder.clone(),
            lease_duration_seconds: self.lease_duration_seconds,
            acquire_second: second(&self.acquire_time),
            renew_second: second(&self.renew_time),
            transitions: self.transitions,
        }
    }

    /// Writes the record into `spec`, keeping the fields leader election does not own
    /// (`preferredHolder`, `strategy`).
    pub(crate) fn write_to(&self, spec: &mut LeaseSpec) {
        spec.holder_identity = Some(self.holder.clone());
        spec.lease_duration_seconds = Some(self.lease_duration_seconds);
        spec.acquire_time.clone_from(&self.acquire_time);
        spec.renew_time.clone_from(&self.renew_time);
        spec.lease_transitions = Some(self.transitions);
    }
}

/// A [`Record`] as client-go compares it: two records with equal views are, to a client-go
/// candidate, the same record, and do not restart its expiry clock. (Its record also holds the
/// Lease's `strategy` and `preferredHolder`, which leader election writes back unchanged.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct View {
    holder: String,
    lease_duration_seconds: i32,
    acquire_second: Option<i64>,
    renew_second: Option<i64>,
    transitions: i32,
}

/// The wall-clock time now, at the microsecond precision a Lease holds.
pub(crate) fn now() -> MicroTime {
    MicroTime(Timestamp::from_microsecond(wall_micros()).unwrap_or(Timestamp::UNIX_EPOCH))
}

#[cfg(not(test))]
fn wall_micros() -> i64 {
    system_micros()
}

/// Microseconds since the Unix epoch by the system clock.
#[cfg_attr(test, allow(dead_code))]
fn system_micros() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_micros()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

/// Unit tests run on tokio's paused clock, which the system clock does not follow: there, the
/// wall clock starts at a whole second when first read on a thread and advances with tokio's.
#[cfg(test)]
fn wall_micros() -> i64 {
    use std::cell::Cell;

    /// 2027-01-15T08:00:00Z.
    const START: i64 = 1_800_000_000_000_000;
    thread_local!(static FIRST_READ: Cell<Option<tokio::time::Instant>> = const { Cell::new(None) });
    let now = tokio::time::Instant::now();
    let first = FIRST_READ.with(|first| {
        first.get().unwrap_or_else(|| {
            first.set(Some(now));
            now
        })
    });
    START + i64::try_from((now - first).as_micros()).unwrap_or(i64::MAX - START)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_a_round_trip_through_a_spec() {
        let record = Record {
            holder: "a".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(now()),
            renew_time: Some(now()),
            transitions: 3,
        };
        let mut spec = LeaseSpec {
            strategy: Some("OldestEmulationVersion".into()),
            ..LeaseSpec::default()
        };
        record.write_to(&mut spec);
        assert_eq!(Record::from_spec(Some(&spec)), record);
        assert_eq!(spec.strategy.as_deref(), Some("OldestEmulationVersion"));
        assert_eq!(Record::from_spec(None), Record::empty());
    }
}
