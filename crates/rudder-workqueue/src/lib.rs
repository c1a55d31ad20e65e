//! An async work queue with client-go's processing rules: dedup, delays, rate limiting and
//! priorities, for Kubernetes controllers and for anything else that must process keys one
//! at a time.
//!
//! Start with [`WorkQueue`]: producers [`add`](WorkQueue::add) keys, workers
//! [`get`](WorkQueue::get) them and drop the [`WorkItem`] when done.
//!
//! ```
//! use std::time::Duration;
//! use rudder_workqueue::WorkQueue;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let queue: WorkQueue<String> = WorkQueue::builder().name("example").build();
//!
//! // Three adds of one key while it waits: it runs once.
//! for _ in 0..3 {
//!     queue.add("default/web".to_string());
//! }
//! queue.add_after("default/db".to_string(), Duration::from_millis(10));
//!
//! let worker = {
//!     let queue = queue.clone();
//!     tokio::spawn(async move {
//!         let mut seen = Vec::new();
//!         while let Some(item) = queue.get().await {
//!             seen.push(item.key().clone());
//!             if item.key() == "default/web" && seen.len() == 1 {
//!                 // Failed: retry later with per-key backoff.
//!                 queue.add_rate_limited(item.key().clone());
//!             } else {
//!                 queue.forget(item.key());
//!             }
//!             if seen.len() == 3 {
//!                 queue.shutdown();
//!             }
//!             // Dropping `item` marks the key done.
//!         }
//!         seen
//!     })
//! };
//! let seen = worker.await.unwrap();
//! assert_eq!(seen, ["default/web", "default/web", "default/db"]);
//! # }
//! ```
//!
//! # The rules
//!
//! These are client-go's, with two of its surprises fixed.
//!
//! - **Dedup.** Adding a key that is already waiting does nothing.
//! - **Never twice at once.** A key handed to a worker is *processing*; no other worker gets
//!   it. Adding it meanwhile marks it dirty, and when the worker is done it is queued exactly
//!   once more. The [`WorkItem`] guard marks the key done when dropped, so a worker that
//!   panics cannot wedge its key; [`WorkItem::done`] says so explicitly.
//! - **Delays merge.** [`add_after`](WorkQueue::add_after) waits, then queues. A key waiting
//!   for a delay and then added now runs once, now; two delays for one key keep the earliest.
//!   (client-go runs the key twice in both cases, kubernetes#126027.)
//! - **Rate limiting.** [`add_rate_limited`](WorkQueue::add_rate_limited) asks the queue's
//!   [`RateLimiter`] for the delay; [`forget`](WorkQueue::forget) clears a key's failures.
//!   See [`rate_limiter`] for the limiters and client-go's defaults.
//! - **Priorities.** [`add_with`](WorkQueue::add_with) takes [`AddOptions`]: a delay, rate
//!   limiting and a priority. Higher priority runs first, first-ready first within a
//!   priority; merging keeps the highest priority and the earliest ready time, so a waiting
//!   key raised to a higher priority keeps its place in line (it goes in among that
//!   priority's keys by when it became ready, not to the back).
//! - **Payloads.** A queue may carry a value with each key ([`Payload`]: `WorkQueue<K, P>`;
//!   nothing, `()`, by default): every add brings one (the adding handle's,
//!   [`WorkQueue::set_payload`], or its own, [`WorkQueue::add_with_payload`]), merged into
//!   what the key's pending run carries, in the queue's slot for the key; the worker takes it
//!   with the key ([`WorkItem::take_payload`]). An add while the key is processing starts the
//!   next run's. A controller records why each key was queued this way.
//! - **Shutdown.** [`shutdown`](WorkQueue::shutdown) stops adds and drops delayed keys; getters
//!   drain the ready keys, then receive `None`.
//!   [`shutdown_with_drain`](WorkQueue::shutdown_with_drain) also waits for in-flight work.
//!
//! # Priority ageing
//!
//! Strict priority lets a steady stream of high-priority keys hold a low-priority key back
//! forever (controller-runtime#3496). Here a ready key gains one priority level for every
//! [`DEFAULT_PRIORITY_AGING`] (one second; see [`Builder::priority_aging`]) it waits: a key of
//! priority `p` that became ready at `t` is ordered by `t - p × aging`. So a priority-0 key
//! added up to `100 × aging` after a priority -100 key became ready still goes first, and any
//! added later goes after it. Within one priority, keys leave in the order they became ready.
//!
//! `t` is when the key became ready, whatever else was waiting then: a key that waited
//! alone has aged all the same when others arrive. For a delayed key it is the time it became
//! due, not when the queue next looked at it; for a key raised to a higher priority, it is
//! still when it first became ready. An ageing period longer than any wait (up to
//! `Duration::MAX`) gives strict priority.
//!
//! # Cost
//!
//! One mutex guards the queue. Keys live once, in a slab; the hash table, the per-priority
//! ready queues and the delayed heap hold slot numbers, so in steady state an add, get and
//! done allocate nothing for keys the queue has seen (the key is cloned once per
//! [`get`](WorkQueue::get): use a key whose clone is cheap, such as an integer or an
//! `Arc<str>`, to avoid even that). A payload lives in the key's slot: no second table and
//! no second lookup; with the default `()` it takes no room and no merge runs. Keys are
//! hashed before the lock is taken. An immediate
//! add reads the clock once when ageing is on (the time it became ready) and not at all with
//! strict priority; when the previous add needed the time, the read happens before the lock
//! too, so other threads do not wait for it (a dedup hit reads no clock). Where reading the
//! clock is slow that read is the largest single cost of an add (32-48 ns on the virtual
//! machines this crate is benchmarked on, and with its conversion about a third of an add,
//! get and done there): a queue that gives every key the same priority loses nothing by
//! turning ageing off with [`Builder::priority_aging`]`(None)`. A getter parks only when
//! nothing is ready, in a waiter list under the same mutex; an add wakes one parked getter,
//! and none when none is parked. At most one timer is armed, by one parked getter, for the earliest delayed key.
//! No task runs in the background except, with metrics on, the 500 ms refresh of the
//! unfinished-work gauges, which ends with the queue. A drained queue keeps the capacity its
//! tables reached, as a `Vec` does.
//!
//! # Metrics
//!
//! Through the [`MetricsProvider`] trait, with client-go's names; see [`metrics`]. The
//! `metrics` feature adds `MetricsCrateProvider` for the `metrics` crate, and in
//! `metrics_crate` the names, the descriptions (`metrics_crate::describe`, for the recorder
//! once installed) and controller-runtime's histogram buckets (`metrics_crate::HISTOGRAM_BUCKETS`,
//! for the exporter: without them a histogram is exported as a summary).
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `metrics` | no | `MetricsCrateProvider`, reporting through the `metrics` crate |
//!
//! [`MetricsProvider`]: metrics::MetricsProvider
//! [`RateLimiter`]: rate_limiter::RateLimiter

// Which feature brings an item, in docs.rs' rendering (`--cfg docsrs`, on nightly).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod clock;
pub mod metrics;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics_crate;
mod options;
mod payload;
mod queue;
pub mod rate_limiter;
mod ready;
mod state;
mod waiters;

pub use options::AddOptions;
pub use payload::Payload;
pub use queue::WorkItem;
pub use queue::{Builder, DEFAULT_PRIORITY_AGING, QueueStats, WorkQueue};
