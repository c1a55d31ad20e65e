//! What observing every API request costs (`rest_client_requests_total`), and what a layer
//! costs built into a client's stack against wrapped around a built client: the same GETs of
//! one ConfigMap through a bare `kube::Client`, through `layers::instrument` (the counting
//! wrapped around a built client: a second request buffer) and through `layers::build`
//! (the counting inside kube's stack, under the client's one buffer), on a local API server
//! (rudder-envtest), in one sitting.
//!
//! Run with `cargo bench -p rudder-client --bench layers -- --bench [--rounds N]
//! [--requests N]` after `cargo xtask envtest install`. For each concurrency (1, then 16 at
//! a time), per round, it times `--requests` (default 2,000) GETs through each client,
//! rotating which goes first; the Prometheus recorder is installed, so the counter really
//! records. It prints each round's microseconds per request and the median ratios to the
//! bare client. Without `--bench` in its arguments (as under `cargo test --benches`) it
//! returns at once.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout
)]

use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use rudder_client::layers::{self, ObserveLayer, instrument};
use rudder_envtest::TestEnv;

/// Microseconds per request for `requests` GETs, `concurrency` at a time.
async fn time(api: &Api<ConfigMap>, requests: usize, concurrency: usize) -> f64 {
    let started = Instant::now();
    futures::stream::iter(0..requests)
        .for_each_concurrent(concurrency, |_| async {
            api.get("target").await.unwrap();
        })
        .await;
    started.elapsed().as_secs_f64() * 1e6 / requests as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The value after `name` in `args`, or `default`.
fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The load average, as /proc/loadavg gives it (the machine is shared: read the figures
/// beside it).
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let rounds = arg(&args, "--rounds", 5);
    let requests = arg(&args, "--requests", 2000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .unwrap();
        let env = TestEnv::start().await.unwrap();
        let ns = env.namespace("client-layers-bench").await.unwrap();
        let bare: Api<ConfigMap> = ns.api();
        let target = ConfigMap {
            metadata: ObjectMeta {
                name: Some("target".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        bare.create(&PostParams::default(), &target).await.unwrap();
        let host = layers::host_of(&env.config().cluster_url);
        let wrapped: Api<ConfigMap> = Api::namespaced(instrument(ns.client(), &host), ns.name());
        let built: Api<ConfigMap> = Api::namespaced(
            layers::build(
                env.config().clone(),
                &ObserveLayer::new().count_requests(&host),
            )
            .unwrap(),
            ns.name(),
        );
        let clients = [("bare", &bare), ("wrapped", &wrapped), ("built", &built)];
        // Warm every client's connections.
        for (_, api) in clients {
            time(api, 200, 16).await;
        }
        println!("load before: {}", load());
        for concurrency in [1, 16] {
            let mut ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
            for round in 0..rounds {
                let mut took = [0.0; 3];
                for i in 0..3 {
                    let at = (i + round) % 3;
                    took[at] = time(clients[at].1, requests, concurrency).await;
                }
                println!(
                    "concurrency {concurrency}, round {}: bare {:.1} µs/request, \
                     wrapped (instrument) {:.1}, built in (one buffer) {:.1}",
                    round + 1,
                    took[0],
                    took[1],
                    took[2],
                );
                ratios[0].push(took[1] / took[0]);
                ratios[1].push(took[2] / took[0]);
            }
            let [w, b] = ratios;
            println!(
                "concurrency {concurrency}: median over {rounds} rounds, wrapped / bare {:.3}, \
                 built in / bare {:.3}",
                median(w),
                median(b)
            );
        }
        println!("load after: {}", load());
        let page = handle.render();
        for line in page
            .lines()
            .filter(|l| l.starts_with("rest_client_requests_total{code=\"200\",method=\"GET\""))
        {
            println!("{line}");
        }
        env.stop().unwrap();
    });
}
