//! What decoding one object costs: a ConfigMap and a realistic Pod (two containers, probes,
//! resources, volumes, a status and managedFields: `tests/fixtures/`, as a 1.37.2 API server
//! sent them), from protobuf with rudder-protobuf against serde_json from the JSON body into
//! the same k8s-openapi type. Prints the median ns per object of each and the ratio; on shared
//! machines the ratio is the result.
//!
//! Run: `cargo bench -p rudder-protobuf --bench decode`.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::hint::black_box;

use criterion::Criterion;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};

const CONFIG_MAP_JSON: &[u8] = include_bytes!("../tests/fixtures/configmap.json");
const CONFIG_MAP_PB: &[u8] = include_bytes!("../tests/fixtures/configmap.pb");
const POD_JSON: &[u8] = include_bytes!("../tests/fixtures/pod.json");
const POD_PB: &[u8] = include_bytes!("../tests/fixtures/pod.pb");

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("decode");
    group.bench_function("configmap/protobuf", |b| {
        b.iter(|| rudder_protobuf::decode::<ConfigMap>(black_box(CONFIG_MAP_PB)).unwrap());
    });
    group.bench_function("configmap/json", |b| {
        b.iter(|| serde_json::from_slice::<ConfigMap>(black_box(CONFIG_MAP_JSON)).unwrap());
    });
    group.bench_function("pod/protobuf", |b| {
        b.iter(|| rudder_protobuf::decode::<Pod>(black_box(POD_PB)).unwrap());
    });
    group.bench_function("pod/json", |b| {
        b.iter(|| serde_json::from_slice::<Pod>(black_box(POD_JSON)).unwrap());
    });
    group.finish();
    c.final_summary();
    println!(
        "bodies: ConfigMap {} B protobuf, {} B JSON; Pod {} B protobuf, {} B JSON",
        CONFIG_MAP_PB.len(),
        CONFIG_MAP_JSON.len(),
        POD_PB.len(),
        POD_JSON.len()
    );
}
