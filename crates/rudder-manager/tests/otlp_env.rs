//! OpenTelemetry export (`otlp` feature) configured by the standard variables alone: a child
//! process (this test binary again, with the variables set, since a test must not change its
//! own environment) builds `Otlp::new()`, ends one span and shuts the exporter down; the
//! receiver on loopback has the span, sent where and how the variables said, with the
//! service name, resource attributes and headers they give, by the specification's
//! precedence.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/otlp_receiver.rs"]
mod otlp_receiver;

use std::process::Command;

use otlp_receiver::Receiver;
use rudder_manager::otlp::Otlp;

/// Set in the child's environment: the child test runs only then.
const CHILD: &str = "RUDDER_OTLP_ENV_CHILD";

/// The child's side: export one span with what the variables configure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_exports_one_span_as_the_variables_configure() {
    if std::env::var_os(CHILD).is_none() {
        // Run by the tests below, in a process of its own.
        return;
    }
    let exporter = Otlp::new()
        .service_name("fallback-name")
        .build()
        .unwrap()
        .expect("the variables configure an endpoint");
    assert!(exporter.install_global());
    tracing::info_span!("from_env", answer = 42).in_scope(|| {});
    exporter.shutdown(None).await.unwrap();
}

/// Runs the child with `vars` (and no other `OTEL_*` variable); asserts it succeeded.
fn run_child(vars: &[(&str, String)]) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "child_exports_one_span_as_the_variables_configure",
            "--nocapture",
        ])
        .env(CHILD, "1");
    for (name, _) in std::env::vars() {
        if name.starts_with("OTEL_") {
            command.env_remove(name);
        }
    }
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "the child failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_protobuf_to_the_generic_endpoint_with_the_service_name_variable() {
    let receiver = Receiver::http().await;
    let base = receiver.http_endpoint().replace("/v1/traces", "");
    let run = tokio::task::spawn_blocking(move || {
        run_child(&[
            // A base: the exporter appends /v1/traces.
            ("OTEL_EXPORTER_OTLP_ENDPOINT", base),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
            ("OTEL_SERVICE_NAME", "name-from-variable".to_owned()),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-tenant=acme%20corp".to_owned(),
            ),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=loses,k8s.cluster.name=cluster-from-variable".to_owned(),
            ),
        ]);
    });
    run.await.unwrap();
    // The child shut its exporter down, which sent what it held, before it exited.
    let spans = receiver.spans();
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(spans[0].name, "from_env");
    assert_eq!(spans[0].attributes["answer"], "42");
    assert_eq!(spans[0].resource["service.name"], "name-from-variable");
    assert_eq!(
        spans[0].resource["k8s.cluster.name"],
        "cluster-from-variable"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_to_the_traces_endpoint_with_the_name_from_the_resource_attributes() {
    let receiver = Receiver::grpc().await;
    let endpoint = receiver.grpc_endpoint();
    let run = tokio::task::spawn_blocking(move || {
        run_child(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint),
            // The traces variable wins over the generic one.
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc".to_owned()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=name-from-attributes".to_owned(),
            ),
        ]);
    });
    run.await.unwrap();
    let spans = receiver.spans();
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(spans[0].name, "from_env");
    assert_eq!(spans[0].resource["service.name"], "name-from-attributes");
    assert!(!spans[0].resource.contains_key("k8s.cluster.name"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampler_variable_is_honoured() {
    let receiver = Receiver::http().await;
    let endpoint = receiver.http_endpoint();
    let run = tokio::task::spawn_blocking(move || {
        run_child(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint),
            ("OTEL_TRACES_SAMPLER", "always_off".to_owned()),
        ]);
    });
    run.await.unwrap();
    assert!(receiver.spans().is_empty(), "{:?}", receiver.spans());
}
