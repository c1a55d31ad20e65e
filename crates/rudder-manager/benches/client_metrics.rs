//! What counting every API request costs (`rest_client_requests_total`,
//! `client_metrics::instrument`): the same GETs of one ConfigMap through a bare `kube::Client`
//! and through an instrumented one, on a local API server (rudder-envtest), in one sitting.
//!
//! Run with `cargo bench -p rudder-manager --bench client_metrics -- --bench [--rounds N]
//! [--requests N]` after `cargo xtask envtest install`. For each concurrency (1, then 16 at
//! a time) it first times `--requests` (default 2,000) GETs through the bare client and
//! through a wrapping that only passes requests on (the cost of the extra hop alone), then,
//! per round, bare and instrumented, alternating which goes first; the Prometheus recorder
//! is installed, so the counter really records. It prints each round's microseconds per
//! request and the median ratios. Without `--bench` in its arguments (as under `cargo test
//! --benches`) it returns at once.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout
)]

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use rudder_envtest::TestEnv;
use rudder_manager::client_metrics::instrument;

/// A layer that only passes requests on, through the inner client's `send`: what wrapping a
/// built client costs without the counting.
#[derive(Clone)]
struct PassThrough(kube::Client);

impl tower_service::Service<http::Request<kube::client::Body>> for PassThrough {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), kube::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move { inner.send(request).await })
    }
}

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

fn main() {
    let Some(args) = fixtures::bench_args() else {
        return;
    };
    let rounds = fixtures::arg(&args, "--rounds", 5);
    let requests = fixtures::arg(&args, "--requests", 2000);
    let runtime = fixtures::runtime();
    runtime.block_on(async {
        let handle = rudder_manager::metrics::prometheus().unwrap();
        let env = TestEnv::start().await.unwrap();
        let ns = env.namespace("client-metrics-bench").await.unwrap();
        let bare: Api<ConfigMap> = ns.api();
        bare.create(&PostParams::default(), &fixtures::config_map("target"))
            .await
            .unwrap();
        let host = rudder_manager::client_metrics::host_of(&env.config().cluster_url);
        let counted: Api<ConfigMap> = Api::namespaced(instrument(ns.client(), &host), ns.name());
        let passed: Api<ConfigMap> = Api::namespaced(
            kube::Client::new(PassThrough(ns.client()), ns.name()),
            ns.name(),
        );
        // Warm both clients' connections.
        time(&bare, 200, 16).await;
        time(&counted, 200, 16).await;
        println!("load before: {}", fixtures::load());
        for concurrency in [1, 16] {
            let mut hop = Vec::new();
            for _ in 0..rounds {
                let b = time(&bare, requests, concurrency).await;
                let p = time(&passed, requests, concurrency).await;
                hop.push(p / b);
            }
            println!(
                "concurrency {concurrency}: median wrapped without counting / bare {:.3}",
                median(hop)
            );
            let mut ratios = Vec::new();
            for round in 0..rounds {
                let (b, c) = if round % 2 == 0 {
                    let b = time(&bare, requests, concurrency).await;
                    (b, time(&counted, requests, concurrency).await)
                } else {
                    let c = time(&counted, requests, concurrency).await;
                    (time(&bare, requests, concurrency).await, c)
                };
                println!(
                    "concurrency {concurrency}, round {}: bare {b:.1} µs/request, \
                     instrumented {c:.1} µs/request, ratio {:.3}",
                    round + 1,
                    c / b
                );
                ratios.push(c / b);
            }
            println!(
                "concurrency {concurrency}: median instrumented / bare {:.3} over {rounds} rounds",
                median(ratios)
            );
        }
        println!("load after: {}", fixtures::load());
        let page = handle.render();
        let counted_gets = page
            .lines()
            .find(|l| l.starts_with("rest_client_requests_total{code=\"200\",method=\"GET\"}"))
            .unwrap_or("none");
        println!("{counted_gets}");
        env.stop().unwrap();
    });
}
