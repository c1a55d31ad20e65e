//! What decoding each object on its own costs: a list page of 500 ConfigMaps (the size
//! kube-runtime's watcher asks for) and single watch events, decoded as kube-runtime's
//! watcher decodes them (`ObjectList<ConfigMap>`, `WatchEvent<ConfigMap>`) and as the
//! cache's typed informers do (`Lenient<ConfigMap>`: each item captured as raw JSON, then
//! decoded). Prints the median ns per object of each and the ratio; on shared machines the
//! ratio is the result.
//!
//! Run: `cargo bench -p rudder-cache --bench decode`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::Criterion;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::{ObjectList, WatchEvent};
use rudder_cache::Lenient;

const PAGE: usize = 500;

/// Median-able ns per object, by (row, side).
static SAMPLES: Mutex<BTreeMap<(&'static str, &'static str), Vec<f64>>> =
    Mutex::new(BTreeMap::new());

/// A ConfigMap like the cache benchmark's: labels, annotations, a few data keys, and
/// managedFields as the API server sends them.
fn object(i: usize) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("cm-{i:05}"),
            "namespace": "bench",
            "uid": format!("6f1c2b8e-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 1000 + i),
            "creationTimestamp": "2026-11-29T18:00:00Z",
            "labels": { "app": "bench", "shard": format!("{}", i % 100) },
            "annotations": { "rudder.dev/note": "x".repeat(40) },
            "managedFields": [{
                "manager": "bench", "operation": "Update", "apiVersion": "v1",
                "time": "2026-11-29T18:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": { "f:data": { ".": {}, "f:a": {}, "f:b": {} },
                              "f:metadata": { "f:labels": { ".": {}, "f:app": {}, "f:shard": {} } } }
            }]
        },
        "data": { "a": "alpha".repeat(10), "b": "beta".repeat(10), "c": format!("{i}") }
    })
}

fn measure(
    c: &mut Criterion,
    row: &'static str,
    side: &'static str,
    per_iter: usize,
    f: impl Fn(),
) {
    c.bench_function(&format!("{row}/{side}"), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            let took = start.elapsed();
            SAMPLES
                .lock()
                .unwrap()
                .entry((row, side))
                .or_default()
                .push(took.as_nanos() as f64 / (iters as f64 * per_iter as f64));
            took
        });
    });
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
        .configure_from_args();
    let page = serde_json::to_string(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMapList",
        "metadata": { "resourceVersion": "99999" },
        "items": (0..PAGE).map(object).collect::<Vec<_>>(),
    }))
    .unwrap();
    // As the API server writes it: `type` first.
    let event = format!(r#"{{"type":"MODIFIED","object":{}}}"#, object(7));
    // The other order makes serde buffer the object before it knows the variant; the
    // lenient decoder then goes through a `serde_json::Value` (the API server never sends
    // this; measured to know the fallback's price).
    let reordered = format!(r#"{{"object":{},"type":"MODIFIED"}}"#, object(7));
    // Both sides decode the same text to the same objects.
    let strict: ObjectList<ConfigMap> = serde_json::from_str(&page).unwrap();
    let lenient: ObjectList<Lenient<ConfigMap>> = serde_json::from_str(&page).unwrap();
    assert!(
        lenient
            .items
            .iter()
            .zip(&strict.items)
            .all(|(l, s)| matches!(l, Lenient::Ok(o) if o == s))
    );

    measure(&mut c, "list page of 500", "kube-runtime", PAGE, || {
        black_box(serde_json::from_str::<ObjectList<ConfigMap>>(black_box(&page)).unwrap());
    });
    measure(&mut c, "list page of 500", "rudder", PAGE, || {
        black_box(
            serde_json::from_str::<ObjectList<Lenient<ConfigMap>>>(black_box(&page)).unwrap(),
        );
    });
    measure(&mut c, "watch event", "kube-runtime", 1, || {
        black_box(serde_json::from_str::<WatchEvent<ConfigMap>>(black_box(&event)).unwrap());
    });
    measure(&mut c, "watch event", "rudder", 1, || {
        black_box(
            serde_json::from_str::<WatchEvent<Lenient<ConfigMap>>>(black_box(&event)).unwrap(),
        );
    });
    measure(
        &mut c,
        "watch event: object before type",
        "kube-runtime",
        1,
        || {
            black_box(
                serde_json::from_str::<WatchEvent<ConfigMap>>(black_box(&reordered)).unwrap(),
            );
        },
    );
    measure(
        &mut c,
        "watch event: object before type",
        "rudder",
        1,
        || {
            black_box(
                serde_json::from_str::<WatchEvent<Lenient<ConfigMap>>>(black_box(&reordered))
                    .unwrap(),
            );
        },
    );
    c.final_summary();

    let mut samples = SAMPLES.lock().unwrap();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!();
    println!(
        "| decode | kube-runtime (whole) ns/object | rudder (each on its own) ns/object | rudder / kube-runtime |"
    );
    println!("|---|---:|---:|---:|");
    for row in [
        "list page of 500",
        "watch event",
        "watch event: object before type",
    ] {
        let k = median(samples.get_mut(&(row, "kube-runtime")).unwrap());
        let r = median(samples.get_mut(&(row, "rudder")).unwrap());
        println!("| {row} | {k:.0} | {r:.0} | {:.2}x |", r / k);
    }
}
