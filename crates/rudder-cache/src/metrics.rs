//! The cache's own counters through the `metrics` crate (the `metrics` feature): names and
//! descriptions.
//!
//! Each count is resolved through the recorder current when it is made, so an informer
//! built before the recorder is installed still reports to it; an informer's watch task
//! calls [`describe`] as it starts, for the recorder the process has by then.

/// `rudder_cache_watch_errors_total{resource}`: watch and list errors (each retried).
pub const WATCH_ERRORS_TOTAL: &str = "rudder_cache_watch_errors_total";
/// `rudder_cache_malformed_objects_total{resource}`: objects that did not decode, skipped.
pub const MALFORMED_OBJECTS_TOTAL: &str = "rudder_cache_malformed_objects_total";
/// `rudder_cache_panics_total{resource, function}`: panics caught in an index function, a
/// transform or a handler (`function` says which), the object skipped.
pub const PANICS_TOTAL: &str = "rudder_cache_panics_total";

/// Describes every counter of the cache (help text) to the recorder current at this call.
/// Calling it again is harmless.
pub fn describe() {
    metrics::describe_counter!(
        WATCH_ERRORS_TOTAL,
        "Total number of watch and list errors of an informer, by resource (each is retried)."
    );
    metrics::describe_counter!(
        MALFORMED_OBJECTS_TOTAL,
        "Total number of objects an informer skipped because they did not decode, by resource."
    );
    metrics::describe_counter!(
        PANICS_TOTAL,
        "Total number of panics caught in an informer's index functions, transforms and \
         handlers, by resource and function."
    );
}
