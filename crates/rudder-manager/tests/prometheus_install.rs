//! The process-wide Prometheus recorder is installed once however many threads ask for it at
//! the same moment (managers built in parallel, tests in one process). A test binary of its
//! own: nothing else in the process installs a recorder first.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]

use std::sync::{Arc, Barrier};
use std::thread;

#[test]
fn concurrent_first_calls_all_get_the_one_recorder() {
    const THREADS: usize = 8;
    let start = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                rudder_manager::metrics::prometheus()
            })
        })
        .collect();
    for handle in handles {
        let result = handle.join().expect("no thread panics");
        assert!(result.is_ok(), "every caller gets the recorder: {result:?}");
    }
    // One recorder: what is recorded through the global facade shows in every handle.
    metrics::counter!("rudder_test_install_once_total").increment(1);
    let text = rudder_manager::metrics::prometheus().unwrap().render();
    assert!(text.contains("rudder_test_install_once_total 1"), "{text}");
}
