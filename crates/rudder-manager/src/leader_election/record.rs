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
/// Two records are compared field by field to tell whether the Lease changed since it was last
/// seen; client-go compares the serialised record, which amounts to the same.
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

/// The wall-clock time now, at the microsecond precision a Lease holds.
pub(crate) fn now() -> MicroTime {
    let micros = match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_micros()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX),
    };
    MicroTime(Timestamp::from_microsecond(micros).unwrap_or(Timestamp::UNIX_EPOCH))
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
