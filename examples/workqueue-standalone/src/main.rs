//! Run with `cargo run -p workqueue-standalone`: the work queue alone, with no Kubernetes.
//!
//! Producers submit jobs by id, some many times over; four workers process them. A job that
//! "fails" is retried with per-key exponential backoff; one that succeeds is forgotten. Urgent
//! jobs jump the line. The output shows each job running once per batch of submissions, never
//! on two workers at once, and the retries spacing out.

#![allow(
    clippy::disallowed_methods,
    reason = "examples may spawn: the example owns its tasks"
)]
// An example reports to its terminal.
#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rudder_workqueue::{AddOptions, WorkQueue};
use tokio::time::Instant;

/// Jobs fail this many times before they succeed, so retries are visible.
fn failures_before_success(job: u32) -> u32 {
    if job.is_multiple_of(5) { 3 } else { 0 }
}

#[tokio::main]
async fn main() {
    let queue: WorkQueue<u32> = WorkQueue::builder().name("jobs").build();
    let started = Instant::now();
    let runs: Arc<Mutex<HashMap<u32, u32>>> = Arc::default();

    // Twenty jobs, each submitted three times in a burst: the queue keeps one of each.
    let mut submissions = 0;
    for _ in 0..3 {
        for job in 1..=20 {
            queue.add(job);
            submissions += 1;
        }
    }
    // An urgent job goes ahead of the backlog.
    queue.add_with(99, AddOptions::new().priority(10));
    submissions += 1;

    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let (queue, runs) = (queue.clone(), runs.clone());
            tokio::spawn(async move {
                while let Some(item) = queue.get().await {
                    let job = *item.key();
                    let attempt = {
                        let mut runs = runs.lock().unwrap_or_else(|e| e.into_inner());
                        let n = runs.entry(job).or_default();
                        *n += 1;
                        *n
                    };
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let ms = started.elapsed().as_millis();
                    if attempt <= failures_before_success(job) {
                        println!("{ms:>5} ms  worker {worker}: job {job:>2} failed (attempt {attempt}), retrying with backoff");
                        queue.add_rate_limited(job);
                    } else {
                        println!("{ms:>5} ms  worker {worker}: job {job:>2} done (attempt {attempt})");
                        queue.forget(&job);
                    }
                    // Dropping `item` marks the job done.
                }
            })
        })
        .collect();

    // Wait (with a deadline) until every job has succeeded, then stop the workers.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = queue.stats();
        if stats.ready + stats.delayed + stats.processing == 0 {
            break;
        }
        if Instant::now() > deadline {
            println!("gave up waiting: {stats:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    queue.shutdown_with_drain().await;
    for w in workers {
        let _ = w.await;
    }
    let runs = runs.lock().unwrap_or_else(|e| e.into_inner());
    let total: u32 = runs.values().sum();
    let retries: u32 = runs.keys().map(|job| failures_before_success(*job)).sum();
    println!(
        "{} jobs, {submissions} submissions, {total} runs: one per job plus {retries} retries",
        runs.len()
    );
}
