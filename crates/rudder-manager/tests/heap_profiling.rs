//! Heap profiles on demand (`heap-profiling` feature), in a binary that makes jemalloc its
//! global allocator and starts its profiler (`_rjem_malloc_conf`), as an operator's would:
//! while a controller reconciles and keeps memory, `/debug/pprof/heap` is a gzipped pprof
//! protobuf that `go tool pprof -top` reads, and the function that allocated what is kept is
//! in it; the index lists the heap profile; a POST is 405.

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
use http_get::{get, post};

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use rudder_controller::Controller;
use rudder_core::{Action, Context, Reconciler, Request};
use rudder_envtest::TestEnv;
use rudder_envtest::poll::eventually;

#[global_allocator]
static ALLOC: rudder_manager::profiling::Jemalloc = rudder_manager::profiling::Jemalloc;

/// jemalloc's profiler, on from the start, sampling every 512 KiB on average (its default,
/// written out as an operator would).
#[allow(
    unsafe_code,
    reason = "jemalloc reads its options from this exported symbol"
)]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8] = b"prof:true,prof_active:true,lg_prof_sample:19\0";

/// What the reconciler keeps: the memory the profile must attribute to it.
static KEPT: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// How many blocks the reconciler keeps, at most (1 MiB each).
const BLOCKS: usize = 32;

/// Allocates a block and keeps it, in a function of its own the profile must name.
#[inline(never)]
fn heap_profiled_reconciler_keep() {
    let block = black_box(vec![7u8; 1 << 20]);
    let mut kept = KEPT.lock().unwrap();
    if kept.len() < BLOCKS {
        kept.push(block);
    }
}

struct Keeper;

impl Reconciler for Keeper {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        heap_profiled_reconciler_keep();
        Ok(Action::requeue_after(Duration::from_millis(5)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heap_profile_names_what_a_reconciler_keeps() {
    let go = pprof::go();
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("heap-profiling").await.unwrap();
    let manager = manager_builder(ns.client(), ns.name())
        .profiling_address(Some(SocketAddr::from(([127, 0, 0, 1], 0))))
        .build()
        .unwrap();
    let controller = Controller::builder("keeper", Keeper).build().unwrap();
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
    eventually(
        "the reconciler to keep its blocks",
        Duration::from_secs(60),
        async || (KEPT.lock().unwrap().len() == BLOCKS).then_some(()),
    )
    .await;

    let (status, index) = get(addr, "/debug/pprof/").await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&index).contains("/debug/pprof/heap"));

    assert_eq!(post(addr, "/debug/pprof/heap").await, 405);
    let (status, bytes) = get(addr, "/debug/pprof/heap").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(
        &bytes[..2],
        [0x1f, 0x8b],
        "gzipped, as Go's heap profiles are"
    );

    let printed = pprof::pprof_top(&go, &bytes, "heap.pb.gz", &["-sample_index=inuse_space"]);
    assert!(
        printed.contains("heap_profiled_reconciler_keep"),
        "the function that keeps the memory is not in the profile:\n{printed}"
    );

    stop.cancel();
    task.await.unwrap().unwrap();
}
