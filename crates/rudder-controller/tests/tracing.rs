//! Each reconcile runs inside a `reconcile` span carrying the controller, the request, the
//! reconcile id, and its causes (how many triggers, the first, how long the key waited).

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::ObjectMeta;
use rudder_controller::Controller;
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Event;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_handler::{EnqueueObject, channel};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context as LayerContext, Layer, SubscriberExt};

/// A span's fields, as (name, value) pairs.
type SpanFields = Vec<(String, String)>;

/// The fields of every `reconcile` span created.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<SpanFields>>>);

struct Fields(SpanFields);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

impl<S: tracing::Subscriber> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: LayerContext<'_, S>) {
        if attrs.metadata().name() == "reconcile" {
            let mut fields = Fields(Vec::new());
            attrs.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
    }
}

/// Reports the reconcile id it was given, from inside its span.
struct Ids(mpsc::UnboundedSender<String>);

impl Reconciler for Ids {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, ctx: Context) -> Result<Action, Self::Error> {
        let _ = self.0.send(ctx.reconcile_id().to_string());
        Ok(Action::done())
    }
}

#[tokio::test]
async fn reconciles_run_in_a_span_with_controller_request_and_id() {
    let spans = Spans::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let (tx, mut ids) = mpsc::unbounded_channel();
    let c = Controller::builder("traced", Ids(tx)).build().unwrap();
    let (events, source) = channel::<ConfigMap>(4);
    c.watch(source, EnqueueObject, vec![]).unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (c, stop) = (c.clone(), stop.clone());
        async move { c.run(stop).await }
    });
    let object = Arc::new(ConfigMap {
        metadata: ObjectMeta {
            namespace: Some("ns".into()),
            name: Some("cm".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    });
    events.send(Event::Generic { object }).await.unwrap();
    let id = ids.recv().await.unwrap();
    stop.cancel();
    task.await.unwrap().unwrap();
    let mut spans = spans.0.lock().unwrap().clone();
    // How long the key waited varies; that it is there does not.
    for fields in &mut spans {
        let before = fields.len();
        fields.retain(|(name, _)| name != "queue_wait_ms");
        assert_eq!(fields.len(), before - 1, "queue_wait_ms in {fields:?}");
    }
    let expected = vec![
        ("controller".to_owned(), "traced".to_owned()),
        ("request".to_owned(), "ns/cm".to_owned()),
        ("reconcile_id".to_owned(), id),
        ("triggers".to_owned(), "1".to_owned()),
        ("cause".to_owned(), "watch/generic".to_owned()),
    ];
    assert_eq!(spans, vec![expected]);
}
