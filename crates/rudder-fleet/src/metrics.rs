//! The fleet's metrics (names and help texts), described when the fleet starts.

/// `rudder_fleet_clusters_engaged`: member clusters engaged on this replica.
pub const CLUSTERS_ENGAGED: &str = "rudder_fleet_clusters_engaged";
/// `rudder_fleet_cluster_engaged{cluster}`: 1 while the cluster is engaged on this replica.
pub const CLUSTER_ENGAGED: &str = "rudder_fleet_cluster_engaged";
/// `rudder_fleet_cluster_synced{cluster}`: 1 once every controller of the cluster synced.
pub const CLUSTER_SYNCED: &str = "rudder_fleet_cluster_synced";
/// `rudder_fleet_cluster_healthy{cluster}`: 0 while the cluster's last answer was a failure.
pub const CLUSTER_HEALTHY: &str = "rudder_fleet_cluster_healthy";
/// `rudder_fleet_cluster_request_failures_total{cluster,reason}`.
pub const REQUEST_FAILURES_TOTAL: &str = "rudder_fleet_cluster_request_failures_total";
/// `rudder_fleet_controller_restarts_total{cluster,controller}`.
pub const CONTROLLER_RESTARTS_TOTAL: &str = "rudder_fleet_controller_restarts_total";
/// `rudder_fleet_provider_errors_total{provider}`.
pub const PROVIDER_ERRORS_TOTAL: &str = "rudder_fleet_provider_errors_total";
/// `rudder_fleet_cluster_engage_seconds{cluster}`: from a provider announcing the cluster
/// until every controller of it synced, for its current engagement.
pub const ENGAGE_SECONDS: &str = "rudder_fleet_cluster_engage_seconds";

/// Describes the fleet's metrics to the recorder current at this call.
pub(crate) fn describe() {
    metrics::describe_gauge!(CLUSTERS_ENGAGED, "Member clusters engaged on this replica.");
    metrics::describe_gauge!(
        CLUSTER_ENGAGED,
        "Whether the member cluster is engaged on this replica (1) or not (0)."
    );
    metrics::describe_gauge!(
        CLUSTER_SYNCED,
        "Whether every controller of the member cluster has synced its sources."
    );
    metrics::describe_gauge!(
        CLUSTER_HEALTHY,
        "Whether the member cluster's API server answered the last request without a failure."
    );
    metrics::describe_counter!(
        REQUEST_FAILURES_TOTAL,
        "Requests to a member cluster that failed, by reason: unreachable, unauthorized, forbidden, server_error."
    );
    metrics::describe_counter!(
        CONTROLLER_RESTARTS_TOTAL,
        "Times a controller of a member cluster ended with an error and was started again."
    );
    metrics::describe_counter!(
        PROVIDER_ERRORS_TOTAL,
        "Errors of a cluster provider: announcements it could not read, runs that failed."
    );
    metrics::describe_gauge!(
        ENGAGE_SECONDS,
        metrics::Unit::Seconds,
        "Time from a provider announcing the member cluster until every controller of it synced."
    );
}

/// Counts an error of the provider called `provider`.
pub(crate) fn provider_error(provider: &str) {
    metrics::counter!(PROVIDER_ERRORS_TOTAL, "provider" => provider.to_owned()).increment(1);
}

/// Sets the gauge `name` (no labels).
pub(crate) fn gauge_set(name: &'static str, value: f64) {
    metrics::gauge!(name).set(value);
}

/// Sets the gauge `name` of the cluster `cluster`.
pub(crate) fn gauge_set_cluster(name: &'static str, cluster: &str, value: f64) {
    metrics::gauge!(name, "cluster" => cluster.to_owned()).set(value);
}
