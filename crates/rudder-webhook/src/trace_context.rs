//! The W3C trace context of an incoming request as the parent of its span (`otlp` feature).

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Makes the span context in `headers` (`traceparent`, `tracestate`) the parent of `span`.
///
/// A request without one, or with one that does not parse, leaves the span a root: a bad
/// header is the caller's mistake and must not fail the review. Without an OpenTelemetry
/// layer under the subscriber, this does nothing.
pub(crate) fn set_parent(span: &tracing::Span, headers: &http::HeaderMap) {
    let context = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if context.span().span_context().is_valid() {
        // Fails only when no OpenTelemetry layer is installed, which is not an error here.
        let _ = span.set_parent(context);
    }
}
