//! The `metrics`-crate provider, end to end: client-go's names and labels in Prometheus text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use rudder_workqueue::WorkQueue;
use rudder_workqueue::metrics_crate::MetricsCrateProvider;

/// The value of the series `name{labels}` in `text`, if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test(start_paused = true)]
async fn reports_client_go_series_with_name_and_extra_labels() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _guard = metrics::set_default_local_recorder(&recorder);

    let q = WorkQueue::builder()
        .name("pods")
        .metrics(MetricsCrateProvider::new().label("controller", "pods"))
        .build();
    q.add("a");
    q.add("b");
    q.add("b");
    q.add_rate_limited("c");
    tokio::time::advance(Duration::from_millis(10)).await;
    let item = q.get().await.unwrap();
    // The first key in flight wakes the unfinished-work updater (an idle queue's sleeps);
    // its first round is a period later, in this advance.
    tokio::task::yield_now().await;
    tokio::time::advance(Duration::from_millis(600)).await;
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;

    let text = handle.render();
    let labels = r#"{name="pods",controller="pods"}"#;
    assert_eq!(
        value(&text, &format!("workqueue_adds_total{labels}")),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        value(&text, &format!("workqueue_retries_total{labels}")),
        Some(1.0)
    );
    // "a" is in flight; "b" waits, and "c" (due after 5 ms of backoff) has joined it.
    assert_eq!(value(&text, &format!("workqueue_depth{labels}")), Some(2.0));
    assert!(
        value(
            &text,
            &format!("workqueue_longest_running_processor_seconds{labels}")
        )
        .unwrap()
            >= 0.5
    );
    assert!(value(&text, &format!("workqueue_unfinished_work_seconds{labels}")).unwrap() >= 0.5);
    drop(item);
    let text = handle.render();
    for name in [
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
    ] {
        assert!(
            text.contains(&format!("{name}_count{labels} 1")),
            "{name} missing from:\n{text}"
        );
    }
}
