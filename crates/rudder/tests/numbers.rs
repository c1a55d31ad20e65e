//! Numbers kept exactly as the API server sent them, through the cache and back: a custom
//! resource created from text holding a corpus of doubles (shortest forms, subnormals,
//! extremes, `-0.0`) and of 64-bit integers beyond 2^53 is read from the cache with every
//! number equal to the server's own bytes, and a write of the cached object (an update of
//! another field) leaves the server holding the same numbers. Compared as text read
//! without a JSON library, by the standard library's correctly rounded parser
//! (`rudder_envtest::numbers`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kube::CustomResource;
use rudder::Request;
use rudder::cache::Cache;
use rudder::client::Client;
use rudder_envtest::numbers::{array, floats, integers, same_float};
use rudder_envtest::poll::eventually;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "numbers.rudder.dev",
    version = "v1",
    kind = "Gauge",
    namespaced
)]
struct GaugeSpec {
    ratios: Vec<f64>,
    counts: Vec<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

const WITHIN: Duration = Duration::from_secs(30);

/// Asserts that `sent` and `got` are the same numbers, token by token.
fn assert_same_floats(what: &str, sent: &[String], got: &[String]) {
    assert_eq!(sent.len(), got.len(), "{what}: count");
    let changed: Vec<String> = sent
        .iter()
        .zip(got)
        .filter(|(a, b)| !same_float(a, b))
        .map(|(a, b)| format!("{a} became {b}"))
        .collect();
    assert!(changed.is_empty(), "{what}: {changed:#?}");
}

/// The object as the server holds it, as text.
async fn stored(client: &kube::Client, path: &str) -> String {
    client
        .request_text(http::Request::get(path).body(Vec::new()).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn the_cache_and_a_cached_write_keep_the_servers_numbers() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("numbers").await.unwrap();
    rudder::client::apply_crd(
        &env.client().unwrap(),
        &<Gauge as kube::CustomResourceExt>::crd(),
        "numbers-test",
        WITHIN,
    )
    .await
    .unwrap();
    let kube = ns.client();
    let collection = format!(
        "/apis/numbers.rudder.dev/v1/namespaces/{}/gauges",
        ns.name()
    );
    let path = format!("{collection}/g");
    // Created from text: nothing on the test's side decodes the numbers first.
    let body = format!(
        r#"{{"apiVersion":"numbers.rudder.dev/v1","kind":"Gauge","metadata":{{"name":"g"}},"spec":{{"ratios":[{}],"counts":[{}]}}}}"#,
        floats().join(","),
        integers().join(",")
    );
    kube.request_text(
        http::Request::post(&collection)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.into_bytes())
            .unwrap(),
    )
    .await
    .unwrap();
    // The server's own bytes: what every read must agree with.
    let server = stored(&kube, &path).await;
    let (ratios, counts) = (
        array(&server, "ratios").unwrap(),
        array(&server, "counts").unwrap(),
    );
    // The server reads the corpus as Go does, correctly rounded, but stores an integral
    // double as an integer (`-0.0` becomes `0`): its bytes, not the corpus, are the truth.
    assert_eq!(ratios.len(), floats().len());
    assert_eq!(counts, integers());

    let token = CancellationToken::new();
    let cache = Cache::builder(kube.clone())
        .default_namespace(ns.name())
        .build(&token);
    let client = Client::new(kube.clone(), cache, "numbers-test");
    let cached = eventually("the gauge in the cache", WITHIN, async || {
        client
            .get::<Gauge>(&Request::namespaced(ns.name(), "g"))
            .await
            .unwrap()
    })
    .await;
    let read: Vec<String> = cached
        .spec
        .ratios
        .iter()
        .map(|r| format!("{r:e}"))
        .collect();
    assert_same_floats("the cache's reading", &ratios, &read);
    let read: Vec<String> = cached.spec.counts.iter().map(i64::to_string).collect();
    assert_eq!(read, counts, "the cache's integers");

    // A write of the cached object, changing another field: the numbers go back unchanged.
    let mut next = (*cached).clone();
    next.spec.note = Some("written".to_owned());
    client.update(&next).await.unwrap();
    let after = stored(&kube, &path).await;
    assert!(after.contains(r#""note":"written""#), "{after}");
    assert_same_floats(
        "the server's numbers after a cached write",
        &ratios,
        &array(&after, "ratios").unwrap(),
    );
    assert_eq!(array(&after, "counts").unwrap(), counts);
    token.cancel();
}
