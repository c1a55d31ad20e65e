//! Conversion over real TLS: a round trip through the hub with a renamed field, order and
//! metadata kept, failures as `Failure` results, bad bodies as HTTP 400, and the coverage
//! check at registration.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::needless_pass_by_value
)]

mod common;

use common::serve;
use http::StatusCode;
use kube::CustomResource;
use rudder_webhook::{
    CONVERT_PATH, ConversionError, Convertible, KindConversion, RegisterError, WebhookServer,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The hub: v2 calls the size `replicas`.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize)]
#[kube(
    group = "test.rudder.rs",
    version = "v2",
    kind = "Widget",
    namespaced,
    schema = "disabled"
)]
pub struct WidgetV2Spec {
    replicas: i64,
    colour: String,
}

mod v1 {
    #![allow(unreachable_pub)]
    use super::*;

    /// The old version: v1 called the size `count`.
    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize)]
    #[kube(
        group = "test.rudder.rs",
        version = "v1",
        kind = "Widget",
        namespaced,
        schema = "disabled"
    )]
    pub struct WidgetV1Spec {
        pub count: i64,
        pub colour: String,
    }
}

impl Convertible<Widget> for v1::Widget {
    fn to_hub(self) -> Result<Widget, ConversionError> {
        if self.spec.colour == "invisible" {
            return Err(ConversionError::new(
                "invisible widgets cannot be converted",
            ));
        }
        Ok(Widget::new(
            "",
            WidgetV2Spec {
                replicas: self.spec.count,
                colour: self.spec.colour,
            },
        ))
    }

    fn from_hub(hub: Widget) -> Result<Self, ConversionError> {
        Ok(v1::Widget::new(
            "",
            v1::WidgetV1Spec {
                count: hub.spec.replicas,
                colour: hub.spec.colour,
            },
        ))
    }
}

fn register(server: &WebhookServer) {
    server
        .register_conversion(
            KindConversion::<Widget>::hub().spoke::<v1::Widget>(),
            ["v1", "v2"],
        )
        .unwrap();
}

fn conversion_review(desired: &str, objects: Vec<Value>) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "conv-1", "desiredAPIVersion": desired, "objects": objects},
    })
}

fn metadata(name: &str) -> Value {
    json!({
        "name": name,
        "namespace": "default",
        "uid": format!("uid-{name}"),
        "resourceVersion": "42",
        "labels": {"keep": "me"},
        "annotations": {"note": "untouched"},
        "creationTimestamp": "2024-01-01T00:00:00Z",
        "managedFields": [{"manager": "test", "operation": "Update"}],
    })
}

#[tokio::test]
async fn objects_round_trip_through_the_hub_in_order_with_metadata_kept() {
    let served = serve(|options| options, register).await;
    assert_eq!(served.server.paths(), [CONVERT_PATH]);
    assert!(served.server.has_conversion());
    let mut client = served.client().await;
    let originals: Vec<Value> = (0..3)
        .map(|i| {
            json!({
                "apiVersion": "test.rudder.rs/v1",
                "kind": "Widget",
                "metadata": metadata(&format!("w{i}")),
                "spec": {"count": i, "colour": format!("c{i}")},
            })
        })
        .collect();
    let answer = client
        .review(
            CONVERT_PATH,
            &conversion_review("test.rudder.rs/v2", originals.clone()),
        )
        .await;
    assert_eq!(answer["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(answer["kind"], "ConversionReview");
    let response = &answer["response"];
    assert_eq!(response["uid"], "conv-1");
    assert_eq!(response["result"]["status"], "Success");
    let converted = response["convertedObjects"].as_array().unwrap().clone();
    assert_eq!(converted.len(), 3);
    for (i, object) in converted.iter().enumerate() {
        assert_eq!(object["apiVersion"], "test.rudder.rs/v2");
        assert_eq!(object["kind"], "Widget");
        assert_eq!(
            object["metadata"], originals[i]["metadata"],
            "metadata untouched"
        );
        assert_eq!(
            object["spec"],
            json!({"replicas": i, "colour": format!("c{i}")})
        );
    }

    // And back: v2 to v1 gives the originals exactly.
    let answer = client
        .review(
            CONVERT_PATH,
            &conversion_review("test.rudder.rs/v1", converted),
        )
        .await;
    assert_eq!(answer["response"]["result"]["status"], "Success");
    assert_eq!(answer["response"]["convertedObjects"], json!(originals));
}

#[tokio::test]
async fn a_failed_conversion_is_a_failure_result_with_the_message() {
    let served = serve(|options| options, register).await;
    let mut client = served.client().await;
    let objects = vec![
        json!({"apiVersion": "test.rudder.rs/v1", "kind": "Widget", "metadata": metadata("fine"), "spec": {"count": 1, "colour": "red"}}),
        json!({"apiVersion": "test.rudder.rs/v1", "kind": "Widget", "metadata": metadata("ghost"), "spec": {"count": 1, "colour": "invisible"}}),
    ];
    let answer = client
        .review(
            CONVERT_PATH,
            &conversion_review("test.rudder.rs/v2", objects),
        )
        .await;
    let response = &answer["response"];
    assert_eq!(response["uid"], "conv-1");
    assert_eq!(response["result"]["status"], "Failure");
    let message = response["result"]["message"].as_str().unwrap();
    assert!(
        message.contains("invisible widgets cannot be converted"),
        "{message}"
    );
    assert!(message.contains("ghost"), "{message}");
    assert_eq!(response["convertedObjects"], json!([]));

    // A kind nobody registered fails the same way.
    let objects = vec![
        json!({"apiVersion": "test.rudder.rs/v1", "kind": "Gadget", "metadata": metadata("g"), "spec": {}}),
    ];
    let answer = client
        .review(
            CONVERT_PATH,
            &conversion_review("test.rudder.rs/v2", objects),
        )
        .await;
    assert_eq!(answer["response"]["result"]["status"], "Failure");
}

#[tokio::test]
async fn an_undecodable_conversion_body_is_http_400() {
    let served = serve(|options| options, register).await;
    let mut client = served.client().await;
    let (status, _) = client
        .post(CONVERT_PATH, "application/json", "{]")
        .await
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = client
        .post(
            CONVERT_PATH,
            "application/json",
            r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}"#,
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[test]
fn registration_fails_unless_every_served_version_is_covered() {
    let server = WebhookServer::new(rudder_webhook::Options::new());
    let error = server
        .register_conversion(KindConversion::<Widget>::hub(), ["v1", "v2"])
        .unwrap_err();
    match &error {
        RegisterError::UncoveredVersions {
            kind,
            hub,
            versions,
        } => {
            assert_eq!(kind, "Widget.test.rudder.rs");
            assert_eq!(hub, "v2");
            assert_eq!(versions, &["v1"]);
        }
        other => panic!("unexpected {other}"),
    }
    assert!(server.is_empty(), "nothing registered on error");
    server
        .register_conversion(
            KindConversion::<Widget>::hub().spoke::<v1::Widget>(),
            ["v1", "v2"],
        )
        .unwrap();
    let again = server
        .register_conversion(
            KindConversion::<Widget>::hub().spoke::<v1::Widget>(),
            ["v1", "v2"],
        )
        .unwrap_err();
    assert!(
        matches!(again, RegisterError::DuplicateConversion { .. }),
        "{again}"
    );
}
