//! controller-runtime's webhook and certwatcher metrics, recorded through the `metrics`
//! crate (whatever recorder the process installed; none, and they cost next to nothing).
//!
//! Every series is resolved through the recorder current when it is recorded, so a server
//! made before the recorder is installed still reports to it. [`describe`] gives a recorder
//! the help texts (the server calls it when it starts; `rudder-manager` calls it when it
//! installs its recorder), and [`HISTOGRAM_BUCKETS`] gives an exporter controller-runtime's
//! buckets for the latency histogram (without them `metrics-exporter-prometheus` exports a
//! summary, which dashboards querying `_bucket` do not find).

use std::time::Instant;

/// Prometheus' default buckets, which controller-runtime's latency histogram uses.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Every histogram this crate reports, with its buckets.
pub const HISTOGRAM_BUCKETS: &[(&str, &[f64])] = &[(LATENCY_SECONDS, LATENCY_BUCKETS)];

/// `controller_runtime_webhook_requests_total{webhook,code}`: requests answered, by path
/// and HTTP status code.
pub const REQUESTS_TOTAL: &str = "controller_runtime_webhook_requests_total";
/// `controller_runtime_webhook_requests_in_flight{webhook}`: requests being handled.
pub const REQUESTS_IN_FLIGHT: &str = "controller_runtime_webhook_requests_in_flight";
/// `controller_runtime_webhook_latency_seconds{webhook}`: time to answer, a histogram.
pub const LATENCY_SECONDS: &str = "controller_runtime_webhook_latency_seconds";
/// `rudder_webhook_requests_by_protocol_total{protocol}`: requests by HTTP version
/// (`HTTP/1.1`, `HTTP/2`, ...); not controller-runtime's: it shows whether callers (the API
/// server) took the HTTP/2 a server offers.
pub const REQUESTS_BY_PROTOCOL_TOTAL: &str = "rudder_webhook_requests_by_protocol_total";
/// `controller_runtime_webhook_panics_total`: admission handlers that panicked.
pub const PANICS_TOTAL: &str = "controller_runtime_webhook_panics_total";
/// `controller_runtime_conversion_webhook_panics_total`: conversions that panicked.
pub const CONVERSION_PANICS_TOTAL: &str = "controller_runtime_conversion_webhook_panics_total";
/// `certwatcher_read_certificate_total`: certificate pairs read and parsed.
pub const CERT_READ_TOTAL: &str = "certwatcher_read_certificate_total";
/// `certwatcher_read_certificate_errors_total`: certificate pairs that could not be read
/// or did not parse.
pub const CERT_READ_ERRORS_TOTAL: &str = "certwatcher_read_certificate_errors_total";

/// A webhook path as a metric label: shared, so labelling a request copies no string.
pub(crate) type PathLabel = metrics::SharedString;

/// The label for `path`.
pub(crate) fn path_label(path: &str) -> PathLabel {
    metrics::SharedString::from(std::sync::Arc::<str>::from(path))
}

/// One request on one webhook path, from its start until dropped.
pub(crate) struct RequestMetrics {
    webhook: PathLabel,
    start: Instant,
}

impl RequestMetrics {
    pub(crate) fn start(webhook: &PathLabel) -> Self {
        metrics::gauge!(REQUESTS_IN_FLIGHT, "webhook" => webhook.clone()).increment(1.0);
        Self {
            webhook: webhook.clone(),
            start: Instant::now(),
        }
    }

    pub(crate) fn finish(self, code: u16) {
        metrics::histogram!(LATENCY_SECONDS, "webhook" => self.webhook.clone())
            .record(self.start.elapsed().as_secs_f64());
        metrics::counter!(REQUESTS_TOTAL, "webhook" => self.webhook.clone(), "code" => code_label(code))
            .increment(1);
        // The gauge goes down in drop, so an abandoned request is not counted in flight
        // forever.
    }
}

impl Drop for RequestMetrics {
    fn drop(&mut self) {
        metrics::gauge!(REQUESTS_IN_FLIGHT, "webhook" => self.webhook.clone()).decrement(1.0);
    }
}

/// An HTTP status code as a label, without formatting the codes this server answers.
fn code_label(code: u16) -> metrics::SharedString {
    let known = match code {
        200 => "200",
        400 => "400",
        404 => "404",
        413 => "413",
        500 => "500",
        _ => return metrics::SharedString::from_owned(code.to_string()),
    };
    metrics::SharedString::const_str(known)
}

/// Counts a request by its HTTP version.
pub(crate) fn request_protocol(version: http::Version) {
    let protocol = match version {
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_10 => "HTTP/1.0",
        _ => "other",
    };
    metrics::counter!(REQUESTS_BY_PROTOCOL_TOTAL, "protocol" => protocol).increment(1);
}

pub(crate) fn admission_panic() {
    metrics::counter!(PANICS_TOTAL).increment(1);
}

pub(crate) fn conversion_panic() {
    metrics::counter!(CONVERSION_PANICS_TOTAL).increment(1);
}

pub(crate) fn certificate_read() {
    metrics::counter!(CERT_READ_TOTAL).increment(1);
}

pub(crate) fn certificate_read_error() {
    metrics::counter!(CERT_READ_ERRORS_TOTAL).increment(1);
}

/// Makes the unlabelled counters exist, at zero, as controller-runtime's do from its start
/// (they are plain counters there): an alert on their `increase` sees the first panic or
/// failed read, and a check of dashboards against a scrape finds them before any happened.
pub(crate) fn register_counters() {
    for name in [
        PANICS_TOTAL,
        CONVERSION_PANICS_TOTAL,
        CERT_READ_TOTAL,
        CERT_READ_ERRORS_TOTAL,
    ] {
        metrics::counter!(name).increment(0);
    }
}

/// Describes every metric of this crate (help text and unit) to the recorder current at this
/// call; descriptions given before a recorder is installed are lost, so the server calls
/// this when it starts, and a process that installs its recorder later calls it then.
/// Calling it again is harmless.
pub fn describe() {
    metrics::describe_counter!(
        REQUESTS_TOTAL,
        "Total number of admission requests by HTTP status code."
    );
    metrics::describe_gauge!(
        REQUESTS_IN_FLIGHT,
        "Current number of admission requests being served."
    );
    metrics::describe_histogram!(
        LATENCY_SECONDS,
        metrics::Unit::Seconds,
        "Histogram of the latency of processing admission requests"
    );
    metrics::describe_counter!(
        REQUESTS_BY_PROTOCOL_TOTAL,
        "Total number of webhook requests by HTTP version."
    );
    metrics::describe_counter!(PANICS_TOTAL, "Total number of webhook panics");
    metrics::describe_counter!(
        CONVERSION_PANICS_TOTAL,
        "Total number of conversion webhook panics"
    );
    metrics::describe_counter!(CERT_READ_TOTAL, "Total number of certificate reads");
    metrics::describe_counter!(
        CERT_READ_ERRORS_TOTAL,
        "Total number of certificate read errors"
    );
}
