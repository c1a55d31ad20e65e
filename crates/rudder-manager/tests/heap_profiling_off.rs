//! Heap profiles asked of a process whose jemalloc profiler was not turned on at start
//! (`heap-profiling` feature, jemalloc the global allocator, no `prof:true`): `501 Not
//! Implemented`, saying what to set; CPU profiles are served as ever.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/http_get.rs"]
mod http_get;

use std::net::SocketAddr;
use std::time::Duration;

use http_get::get;
use rudder_envtest::TestEnv;
use rudder_envtest::poll::eventually;

#[global_allocator]
static ALLOC: rudder_manager::profiling::Jemalloc = rudder_manager::profiling::Jemalloc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_prof_true_a_heap_profile_says_how_to_turn_it_on() {
    // Nothing here may be configured from outside: the test is about the default.
    assert!(std::env::var_os("_RJEM_MALLOC_CONF").is_none());
    let env = TestEnv::builder().shared().await.unwrap();
    let manager = std::sync::Arc::new(
        rudder_manager::Manager::builder(env.client().unwrap())
            .health_probe_address(None)
            .metrics_address(None)
            .profiling_address(Some(SocketAddr::from(([127, 0, 0, 1], 0))))
            .build()
            .unwrap(),
    );
    let (stop, task) = fixtures::start_shared(&manager);
    let addr = eventually(
        "the profiling server",
        Duration::from_secs(30),
        async || manager.profiling_address(),
    )
    .await;
    let (status, body) = get(addr, "/debug/pprof/heap").await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 501, "{body}");
    assert!(
        body.contains("_RJEM_MALLOC_CONF=prof:true"),
        "the answer says what to set: {body}"
    );
    assert_eq!(get(addr, "/debug/pprof/profile?seconds=0").await.0, 400);
    stop.cancel();
    task.await.unwrap().unwrap();
}
