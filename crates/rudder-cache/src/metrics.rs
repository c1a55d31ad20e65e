//! The cache's own counters and gauges through the `metrics` crate (the `metrics` feature): names and
//! descriptions.
//!
//! Each count is resolved through the recorder current when it is made, so an informer
//! built before the recorder is installed still reports to it; an informer's watch task
//! calls [`describe`] as it starts, for the recorder the process has by then.

/// `rudder_cache_watch_errors_total{resource}`: watch and list errors (each retried).
pub const WATCH_ERRORS_TOTAL: &str = "rudder_cache_watch_errors_total";
/// `rudder_cache_watch_refusals_total{resource, code}`: lists and watches the API server
/// refused with 401 Unauthorized or 403 Forbidden (`code`), each also a watch error; a
/// streak of them is logged once.
pub const WATCH_REFUSALS_TOTAL: &str = "rudder_cache_watch_refusals_total";
/// `rudder_cache_malformed_objects_total{resource}`: objects that did not decode, skipped.
pub const MALFORMED_OBJECTS_TOTAL: &str = "rudder_cache_malformed_objects_total";
/// `rudder_cache_panics_total{resource, function}`: panics caught in an index function, a
/// transform or a handler (`function` says which), the object skipped.
pub const PANICS_TOTAL: &str = "rudder_cache_panics_total";

/// `rudder_cache_relists_total{resource}`: lists after an informer's first (a watch that
/// could not resume).
pub const RELISTS_TOTAL: &str = "rudder_cache_relists_total";
/// `rudder_cache_objects{resource}`: objects an informer holds.
pub const OBJECTS: &str = "rudder_cache_objects";
/// `rudder_cache_object_bytes{resource}`: an estimate of the bytes those objects take, the
/// sum of their sizes as JSON (see `InformerStats::bytes_held`).
pub const OBJECT_BYTES: &str = "rudder_cache_object_bytes";
/// `rudder_cache_sync_duration_seconds{resource}`: how long an informer took to its first
/// sync (0 until then).
pub const SYNC_DURATION_SECONDS: &str = "rudder_cache_sync_duration_seconds";
/// `rudder_cache_list_strategy{resource, strategy}`: 1 for the strategy (`streaming`,
/// `paginated`) an informer lists with now, 0 for the other.
pub const LIST_STRATEGY: &str = "rudder_cache_list_strategy";
/// `rudder_cache_wire_format{resource, format}`: 1 for the wire format (`protobuf`, `json`)
/// an informer lists and watches in now, 0 for the other.
pub const WIRE_FORMAT: &str = "rudder_cache_wire_format";
/// `rudder_cache_reader_started_informers_total{resource}`: cluster-wide informers that a
/// cached read started because none was running (each also logged at `warn`).
pub const READER_STARTED_INFORMERS_TOTAL: &str = "rudder_cache_reader_started_informers_total";

/// Describes every counter of the cache (help text) to the recorder current at this call.
/// Calling it again is harmless.
pub fn describe() {
    metrics::describe_counter!(
        WATCH_ERRORS_TOTAL,
        "Total number of watch and list errors of an informer, by resource (each is retried)."
    );
    metrics::describe_counter!(
        WATCH_REFUSALS_TOTAL,
        "Total number of lists and watches of an informer the API server refused with 401 or \
         403, by resource and code (each also a watch error)."
    );
    metrics::describe_counter!(
        MALFORMED_OBJECTS_TOTAL,
        "Total number of objects an informer skipped because they did not decode, by resource."
    );
    metrics::describe_counter!(
        RELISTS_TOTAL,
        "Total number of lists of an informer after its first, by resource."
    );
    metrics::describe_counter!(
        READER_STARTED_INFORMERS_TOTAL,
        "Total number of cluster-wide informers a cached read started, by resource."
    );
    metrics::describe_gauge!(OBJECTS, "Number of objects an informer holds, by resource.");
    metrics::describe_gauge!(
        OBJECT_BYTES,
        metrics::Unit::Bytes,
        "Estimated bytes of the objects an informer holds (their size as JSON), by resource."
    );
    metrics::describe_gauge!(
        SYNC_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "Seconds an informer took from its start to its first sync, by resource."
    );
    metrics::describe_gauge!(
        LIST_STRATEGY,
        "1 for the list strategy (streaming or paginated) an informer uses now, by resource."
    );
    metrics::describe_gauge!(
        WIRE_FORMAT,
        "1 for the wire format (protobuf or json) an informer lists and watches in now, by \
         resource."
    );
    metrics::describe_counter!(
        PANICS_TOTAL,
        "Total number of panics caught in an informer's index functions, transforms and \
         handlers, by resource and function."
    );
}
