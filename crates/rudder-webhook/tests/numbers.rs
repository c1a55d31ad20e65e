//! Numbers kept exactly as the API server sent them through the webhook's public API: a
//! conversion gives back every double and 64-bit integer of a corpus (shortest forms,
//! subnormals, extremes, `-0.0`, integers beyond 2^53) as the same number, and a
//! defaulter's patch touches only what the defaulter changed, never a number it read.
//! The numbers are compared as text read without a JSON library, by the standard library's
//! correctly rounded parser (`rudder_envtest::numbers`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::needless_pass_by_value
)]

mod common;

use common::{serve, wire_patch};
use http::StatusCode;
use kube::CustomResource;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use rudder_envtest::numbers::{array, floats, integers, same_float};
use rudder_webhook::admission::{Defaulter, Denial, Warnings};
use rudder_webhook::{
    CONVERT_PATH, ConversionError, Convertible, KindConversion, Webhook, mutate_path,
};
use serde::{Deserialize, Serialize};

/// The hub.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize)]
#[kube(
    group = "numbers.rudder.rs",
    version = "v2",
    kind = "Gauge",
    namespaced,
    schema = "disabled"
)]
pub struct GaugeV2Spec {
    ratios: Vec<f64>,
    counts: Vec<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    colour: Option<String>,
}

mod v1 {
    #![allow(unreachable_pub)]
    use super::*;

    /// The old version: the same numbers under other names.
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize)]
    #[kube(
        group = "numbers.rudder.rs",
        version = "v1",
        kind = "Gauge",
        namespaced,
        schema = "disabled"
    )]
    pub struct GaugeV1Spec {
        pub fractions: Vec<f64>,
        pub tallies: Vec<i64>,
    }
}

impl Convertible<Gauge> for v1::Gauge {
    fn to_hub(self) -> Result<Gauge, ConversionError> {
        Ok(Gauge::new(
            "",
            GaugeV2Spec {
                ratios: self.spec.fractions,
                counts: self.spec.tallies,
                colour: None,
            },
        ))
    }

    fn from_hub(hub: Gauge) -> Result<Self, ConversionError> {
        Ok(v1::Gauge::new(
            "",
            v1::GaugeV1Spec {
                fractions: hub.spec.ratios,
                tallies: hub.spec.counts,
            },
        ))
    }
}

/// Fills in a colour: the only change a defaulting patch may carry.
struct Paint;

impl Defaulter<Gauge> for Paint {
    async fn default(
        &self,
        gauge: &mut Gauge,
        _request: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        gauge.spec.colour.get_or_insert_with(|| "grey".to_owned());
        Ok(Vec::new())
    }
}

/// Asserts that `sent` and `got` are the same numbers, token by token.
fn assert_same_floats(what: &str, sent: &[String], got: &[String]) {
    assert_eq!(sent.len(), got.len(), "{what}: count");
    let changed: Vec<String> = sent
        .iter()
        .zip(got)
        .filter(|(a, b)| !same_float(a, b))
        .map(|(a, b)| format!("{a} came back as {b}"))
        .collect();
    assert!(changed.is_empty(), "{what}: {changed:#?}");
}

/// The metadata of a stored object, written out by hand.
const METADATA: &str = r#"{"name":"g","namespace":"default","uid":"uid-g","resourceVersion":"7"}"#;

#[tokio::test]
async fn a_conversion_gives_back_every_number_as_sent() {
    let served = serve(
        |options| options,
        |server| {
            server
                .register_conversion(
                    KindConversion::<Gauge>::hub().spoke::<v1::Gauge>(),
                    ["v1", "v2"],
                )
                .unwrap();
        },
    )
    .await;
    let mut client = served.client().await;
    let (ratios, counts) = (floats(), integers());
    // Written as text, so that nothing on the test's side decodes the numbers first.
    let body = format!(
        r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"n-1","desiredAPIVersion":"numbers.rudder.rs/v1","objects":[{{"apiVersion":"numbers.rudder.rs/v2","kind":"Gauge","metadata":{METADATA},"spec":{{"ratios":[{}],"counts":[{}]}}}}]}}}}"#,
        ratios.join(","),
        counts.join(",")
    );
    let (status, answer) = client
        .post(CONVERT_PATH, "application/json", body)
        .await
        .unwrap();
    let answer = String::from_utf8(answer.to_vec()).unwrap();
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(answer.contains(r#""status":"Success""#), "{answer}");
    assert_same_floats(
        "doubles through a conversion",
        &ratios,
        &array(&answer, "fractions").unwrap(),
    );
    assert_eq!(array(&answer, "tallies").unwrap(), counts);
}

#[tokio::test]
async fn a_defaulting_patch_touches_no_number_it_read() {
    let served = serve(
        |options| options,
        |server| {
            server
                .register(mutate_path::<Gauge>(), Webhook::defaulter(Paint))
                .unwrap();
        },
    )
    .await;
    let mut client = served.client().await;
    let (ratios, counts) = (floats(), integers());
    let object = format!(
        r#"{{"apiVersion":"numbers.rudder.rs/v2","kind":"Gauge","metadata":{METADATA},"spec":{{"ratios":[{}],"counts":[{}]}}}}"#,
        ratios.join(","),
        counts.join(",")
    );
    let body = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"n-2","kind":{{"group":"numbers.rudder.rs","version":"v2","kind":"Gauge"}},"resource":{{"group":"numbers.rudder.rs","version":"v2","resource":"gauges"}},"name":"g","namespace":"default","operation":"CREATE","userInfo":{{"username":"tester"}},"object":{object},"oldObject":null,"dryRun":false}}}}"#
    );
    let (status, answer) = client
        .post(&mutate_path::<Gauge>(), "application/json", body)
        .await
        .unwrap();
    let text = String::from_utf8(answer.to_vec()).unwrap();
    assert_eq!(status, StatusCode::OK, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["response"]["allowed"], true, "{text}");
    let patch = serde_json::to_value(wire_patch(&answer)).unwrap();
    let paths: Vec<&str> = patch
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/spec/colour"], "{patch}");
}
