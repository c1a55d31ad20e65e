//! CPU profiles on demand (`profiling` feature): while a controller reconciles, a profile
//! fetched from `/debug/pprof/profile` is a pprof protobuf that `go tool pprof -top` reads,
//! and the reconciler's own function is among its top entries; a second profile while one
//! runs is 409, a bad `seconds` 400, an unknown path 404.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/http_get.rs"]
mod http_get;
#[path = "support/pprof.rs"]
mod pprof;

use fixtures::{config_map, manager_builder, watch_config_maps};
use http_get::get;

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use rudder_controller::Controller;
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_envtest::TestEnv;
use rudder_envtest::poll::eventually;

/// Spends CPU on every reconcile, in a function of its own the profile must name.
struct Busy;

#[inline(never)]
fn profiled_reconciler_spin() -> u64 {
    let mut x: u64 = 1;
    for i in 0..2_000_000u64 {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    x
}

impl Reconciler for Busy {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        black_box(profiled_reconciler_spin());
        // Again at once: the controller keeps working while the profile is taken.
        Ok(Action::requeue_after(Duration::from_millis(1)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_taken_while_a_controller_works_names_its_reconciler() {
    let go = pprof::go();
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("profiling").await.unwrap();
    let manager = manager_builder(ns.client(), ns.name())
        .profiling_address(Some(SocketAddr::from(([127, 0, 0, 1], 0))))
        .build()
        .unwrap();
    let controller = Controller::builder("busy", Busy).build().unwrap();
    watch_config_maps(&manager, &controller);
    manager.add_controller(controller);
    let manager = std::sync::Arc::new(manager);
    let (stop, task) = fixtures::start_shared(&manager);
    let api: Api<ConfigMap> = ns.api();
    api.create(&PostParams::default(), &config_map("work"))
        .await
        .unwrap();
    let addr = eventually(
        "the profiling server",
        Duration::from_secs(30),
        async || manager.profiling_address(),
    )
    .await;

    let (status, index) = get(addr, "/debug/pprof/").await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&index).contains("/debug/pprof/profile"));
    assert_eq!(get(addr, "/debug/pprof/profile?seconds=0").await.0, 400);
    assert_eq!(get(addr, "/debug/pprof/heap").await.0, 404);

    let long =
        move || tokio::spawn(async move { get(addr, "/debug/pprof/profile?seconds=3").await });
    let mut profile = long();
    // While it runs, a second one is refused. A poll that reaches the server before the
    // first has begun takes the profiler itself (200 after its second) and the first is
    // refused instead: it is then asked again, until a poll is the one refused.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match get(addr, "/debug/pprof/profile?seconds=1").await.0 {
            409 => break,
            200 if profile.is_finished() => profile = long(),
            _ => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no second profile refused within 30 s"
        );
    }
    let (status, bytes) = profile.await.unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert!(!bytes.is_empty());

    let printed = pprof::pprof_top(&go, &bytes, "cpu.pb", &[]);
    assert!(
        printed.contains("profiled_reconciler_spin"),
        "the reconciler's function is not in the profile:\n{printed}"
    );

    stop.cancel();
    task.await.unwrap().unwrap();
}
