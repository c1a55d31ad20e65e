//! Starting a control plane logs no errors: the 500s a starting API server answers to
//! `/readyz` are expected, and must not reach a test's log as ERROR lines. (Its own test
//! binary: the subscriber is process-wide.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};

/// Counts ERROR events.
struct Errors(Arc<AtomicUsize>);

impl<S: Subscriber> Layer<S> for Errors {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() == Level::ERROR {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::test]
async fn start_logs_no_errors() {
    let errors = Arc::new(AtomicUsize::new(0));
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(Errors(Arc::clone(&errors))),
    )
    .unwrap();
    let env = rudder_envtest::TestEnv::start().await.unwrap();
    // The counter works: an error logged here is seen.
    tracing::error!("one on purpose");
    assert_eq!(
        errors.load(Ordering::Relaxed),
        1,
        "ERROR lines while starting"
    );
    env.stop().unwrap();
}
