//! Admission over real TLS: defaulting patches, denials, field errors, bad input, panics,
//! dry-run, review versions, registration errors, metrics.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::needless_pass_by_value
)]

mod common;

use common::{counter, review, serve, wire_patch};
use http::StatusCode;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use rudder_webhook::admission::{
    AdmissionHandler, Defaulter, Denial, FieldError, Validator, Warnings, allowed,
};
use rudder_webhook::{RegisterError, Webhook, WebhookServer, mutate_path, validate_path};
use serde_json::{Value, json};

struct AddKey;

impl Defaulter<ConfigMap> for AddKey {
    async fn default(
        &self,
        config: &mut ConfigMap,
        _request: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        if config.metadata.name.as_deref() == Some("deny") {
            return Err(Denial::new("no defaults for you"));
        }
        config
            .data
            .get_or_insert_with(Default::default)
            .insert("defaulted".to_owned(), "yes".to_owned());
        Ok(vec!["defaulted a key".to_owned()])
    }
}

struct Rules;

impl Validator<ConfigMap> for Rules {
    async fn validate_create(
        &self,
        config: &ConfigMap,
        _request: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        let data = config.data.clone().unwrap_or_default();
        if data.contains_key("bad") {
            return Err(Denial::new("the key bad is not allowed").with_warnings(["think again"]));
        }
        if data.contains_key("invalid") {
            return Err(Denial::invalid([
                FieldError::invalid("data.invalid", "must not be set"),
                FieldError::required("data.needed", "must be set"),
            ]));
        }
        Ok(vec!["looks fine".to_owned()])
    }

    async fn validate_update(
        &self,
        old: &ConfigMap,
        _new: &ConfigMap,
        _request: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        let locked = old
            .data
            .as_ref()
            .is_some_and(|data| data.get("locked").is_some_and(|v| v == "true"));
        if locked {
            return Err(Denial::new("locked").with_code(409, "Conflict"));
        }
        Ok(Vec::new())
    }
}

/// Answers with the request's dry-run flag as a warning.
struct DryRunEcho;

impl AdmissionHandler for DryRunEcho {
    async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let mut response = allowed(&request);
        response.warnings = Some(vec![format!("dryRun={}", request.dry_run)]);
        response
    }
}

struct Panics;

impl AdmissionHandler for Panics {
    async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        if request.name == "test" {
            panic!("handler bug");
        }
        allowed(&request)
    }
}

fn register_all(server: &WebhookServer) {
    server
        .register(mutate_path::<ConfigMap>(), Webhook::defaulter(AddKey))
        .unwrap();
    server
        .register(validate_path::<ConfigMap>(), Webhook::validator(Rules))
        .unwrap();
    server
        .register("/dry-run", Webhook::admission(DryRunEcho))
        .unwrap();
    server
        .register("/panics", Webhook::admission(Panics))
        .unwrap();
}

const CONFIG_MAP: (&str, &str, &str) = ("", "v1", "ConfigMap");

fn config_map(name: &str, data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": {"a": "b"}},
        "data": data,
        "somethingNew": {"kept": true},
    })
}

fn apply_patch(object: &Value, response: &Value) -> Value {
    let patch = wire_patch(response);
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    patched
}

#[tokio::test]
async fn defaulting_answers_a_patch_that_keeps_unknown_fields() {
    let served = serve(|options| options, register_all).await;
    let mut client = served.client().await;
    let object = config_map("plain", json!({"x": "1"}));
    let answer = client
        .review(
            &mutate_path::<ConfigMap>(),
            &review("uid-1", "CREATE", CONFIG_MAP, Some(object.clone()), None),
        )
        .await;
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    let response = &answer["response"];
    assert_eq!(response["uid"], "uid-1");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    assert_eq!(response["warnings"], json!(["defaulted a key"]));
    let patched = apply_patch(&object, &answer);
    let mut expected = object.clone();
    expected["data"]["defaulted"] = json!("yes");
    assert_eq!(patched, expected, "only the defaulted key changes");
    let patch = wire_patch(&answer);
    assert!(
        patch
            .0
            .iter()
            .all(|op| !matches!(op, json_patch::PatchOperation::Remove(_))),
        "{patch:?}"
    );
}

#[tokio::test]
async fn a_defaulter_may_deny() {
    let served = serve(|options| options, register_all).await;
    let mut client = served.client().await;
    let answer = client
        .review(
            &mutate_path::<ConfigMap>(),
            &review(
                "uid-d",
                "CREATE",
                CONFIG_MAP,
                Some(config_map("deny", json!({}))),
                None,
            ),
        )
        .await;
    let response = &answer["response"];
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(response["status"]["message"], "no defaults for you");
    assert!(response.get("patch").is_none());
}

#[tokio::test]
async fn validation_denies_with_message_code_and_warnings() {
    let served = serve(|options| options, register_all).await;
    let mut client = served.client().await;
    let path = validate_path::<ConfigMap>();

    let answer = client
        .review(
            &path,
            &review(
                "uid-ok",
                "CREATE",
                CONFIG_MAP,
                Some(config_map("a", json!({}))),
                None,
            ),
        )
        .await;
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(answer["response"]["warnings"], json!(["looks fine"]));

    let answer = client
        .review(
            &path,
            &review(
                "uid-bad",
                "CREATE",
                CONFIG_MAP,
                Some(config_map("a", json!({"bad": "1"}))),
                None,
            ),
        )
        .await;
    let response = &answer["response"];
    assert_eq!(response["uid"], "uid-bad");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(response["status"]["reason"], "Forbidden");
    assert_eq!(response["status"]["message"], "the key bad is not allowed");
    assert_eq!(response["warnings"], json!(["think again"]));

    let locked = config_map("a", json!({"locked": "true"}));
    let answer = client
        .review(
            &path,
            &review(
                "uid-up",
                "UPDATE",
                CONFIG_MAP,
                Some(locked.clone()),
                Some(locked),
            ),
        )
        .await;
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 409);
    assert_eq!(answer["response"]["status"]["message"], "locked");

    let answer = client
        .review(
            &path,
            &review(
                "uid-del",
                "DELETE",
                CONFIG_MAP,
                None,
                Some(config_map("a", json!({}))),
            ),
        )
        .await;
    assert_eq!(answer["response"]["allowed"], true);
}

#[tokio::test]
async fn field_errors_are_422_invalid_with_causes() {
    let served = serve(|options| options, register_all).await;
    let mut client = served.client().await;
    let answer = client
        .review(
            &validate_path::<ConfigMap>(),
            &review(
                "uid-i",
                "CREATE",
                CONFIG_MAP,
                Some(config_map("a", json!({"invalid": "1"}))),
                None,
            ),
        )
        .await;
    let status = &answer["response"]["status"];
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(status["code"], 422);
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(
        status["message"],
        "data.invalid: must not be set, data.needed: must be set"
    );
    assert_eq!(status["details"]["kind"], "ConfigMap");
    assert_eq!(
        status["details"]["causes"],
        json!([
            {"reason": "FieldValueInvalid", "field": "data.invalid", "message": "must not be set"},
            {"reason": "FieldValueRequired", "field": "data.needed", "message": "must be set"},
        ])
    );
}

#[tokio::test]
async fn an_undecodable_review_or_object_is_400_with_the_uid() {
    let served = serve(|options| options, register_all).await;
    let mut client = served.client().await;
    // The object is not a ConfigMap (data must map strings to strings).
    let answer = client
        .review(
            &validate_path::<ConfigMap>(),
            &review(
                "uid-obj",
                "CREATE",
                CONFIG_MAP,
                Some(config_map("a", json!({"n": 5}))),
                None,
            ),
        )
        .await;
    assert_eq!(answer["response"]["uid"], "uid-obj");
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 400);

    // The review itself does not decode (operation unknown), but its uid is readable.
    let mut broken = review("uid-rev", "EXPLODE", CONFIG_MAP, None, None);
    broken["request"]["operation"] = json!("EXPLODE");
    let answer = client.review(&validate_path::<ConfigMap>(), &broken).await;
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["response"]["uid"], "uid-rev");
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 400);

    // JSON, but not a review at all.
    let answer = client.review("/dry-run", &json!([1, 2, 3])).await;
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 400);
}

#[tokio::test]
async fn non_json_bodies_and_other_content_types_are_http_400() {
    let served = serve(|options| options, register_all).await;
    let mut client = served.client().await;
    let path = validate_path::<ConfigMap>();
    let (status, _) = client
        .post(&path, "application/json", "{not json")
        .await
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let body = serde_json::to_vec(&review(
        "u",
        "CREATE",
        CONFIG_MAP,
        Some(config_map("a", json!({}))),
        None,
    ))
    .unwrap();
    let (status, _) = client
        .post(&path, "text/plain", body.clone())
        .await
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = client
        .post(&path, "application/json", Vec::new())
        .await
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = client
        .post("/nowhere", "application/json", body.clone())
        .await
        .unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND);
    // The connection still serves a good request.
    let (status, _) = client
        .post(&path, "application/json; charset=utf-8", body)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn an_oversized_body_is_413() {
    let served = serve(|options| options.max_body_size(64 * 1024), register_all).await;
    let mut client = served.client().await;
    let big = config_map("a", json!({"big": "x".repeat(100 * 1024)}));
    let body = serde_json::to_vec(&review("u", "CREATE", CONFIG_MAP, Some(big), None)).unwrap();
    let (status, _) = client
        .post(&validate_path::<ConfigMap>(), "application/json", body)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn the_default_body_limit_is_7_mib() {
    assert_eq!(rudder_webhook::DEFAULT_MAX_BODY_SIZE, 7 * 1024 * 1024);
    let served = serve(|options| options, register_all).await;
    let mut client = served.client().await;
    let big = config_map("a", json!({"big": "x".repeat(8 * 1024 * 1024)}));
    let body = serde_json::to_vec(&review("u", "CREATE", CONFIG_MAP, Some(big), None)).unwrap();
    let (status, _) = client
        .post(&validate_path::<ConfigMap>(), "application/json", body)
        .await
        .unwrap_or((StatusCode::PAYLOAD_TOO_LARGE, Default::default()));
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let fits = config_map("a", json!({"big": "x".repeat(6 * 1024 * 1024)}));
    let mut client = served.client().await;
    let answer = client
        .review(
            &validate_path::<ConfigMap>(),
            &review("u", "CREATE", CONFIG_MAP, Some(fits), None),
        )
        .await;
    assert_eq!(answer["response"]["allowed"], true);
}

#[tokio::test]
async fn a_panicking_handler_is_answered_500_and_counted() {
    let before = counter("controller_runtime_webhook_panics_total", "");
    let served = serve(|options| options, register_all).await;
    let mut client = served.client().await;
    let answer = client
        .review(
            "/panics",
            &review(
                "uid-p",
                "CREATE",
                CONFIG_MAP,
                Some(config_map("a", json!({}))),
                None,
            ),
        )
        .await;
    assert_eq!(answer["response"]["uid"], "uid-p");
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 500);
    assert!(
        answer["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("handler bug")
    );
    assert!(counter("controller_runtime_webhook_panics_total", "") >= before + 1.0);
    // The server goes on serving.
    let answer = client
        .review(
            "/dry-run",
            &review(
                "uid-after",
                "CREATE",
                CONFIG_MAP,
                Some(config_map("a", json!({}))),
                None,
            ),
        )
        .await;
    assert_eq!(answer["response"]["allowed"], true);
}

#[tokio::test]
async fn dry_run_reaches_the_handler() {
    let served = serve(|options| options, register_all).await;
    let mut client = served.client().await;
    for dry_run in [true, false] {
        let mut request = review(
            "u",
            "CREATE",
            CONFIG_MAP,
            Some(config_map("a", json!({}))),
            None,
        );
        request["request"]["dryRun"] = json!(dry_run);
        let answer = client.review("/dry-run", &request).await;
        assert_eq!(
            answer["response"]["warnings"],
            json!([format!("dryRun={dry_run}")])
        );
    }
}

#[tokio::test]
async fn a_v1beta1_review_is_answered_in_v1beta1() {
    let served = serve(|options| options, register_all).await;
    let mut client = served.client().await;
    let mut request = review(
        "uid-b",
        "CREATE",
        CONFIG_MAP,
        Some(config_map("a", json!({}))),
        None,
    );
    request["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let answer = client.review(&validate_path::<ConfigMap>(), &request).await;
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], "uid-b");
    assert_eq!(answer["response"]["allowed"], true);
}

#[tokio::test]
async fn requests_are_counted_by_webhook_and_code() {
    let served = serve(|options| options, register_all).await;
    let mut client = served.client().await;
    let labels_ok = r#"{webhook="/dry-run",code="200"}"#;
    let labels_bad = r#"{webhook="/dry-run",code="400"}"#;
    let ok_before = counter("controller_runtime_webhook_requests_total", labels_ok);
    let bad_before = counter("controller_runtime_webhook_requests_total", labels_bad);
    client
        .review(
            "/dry-run",
            &review(
                "u",
                "CREATE",
                CONFIG_MAP,
                Some(config_map("a", json!({}))),
                None,
            ),
        )
        .await;
    client
        .post("/dry-run", "application/json", "nope")
        .await
        .unwrap();
    assert_eq!(
        counter("controller_runtime_webhook_requests_total", labels_ok),
        ok_before + 1.0
    );
    assert_eq!(
        counter("controller_runtime_webhook_requests_total", labels_bad),
        bad_before + 1.0
    );
    let rendered = common::metrics().render();
    assert!(
        rendered
            .contains(r#"controller_runtime_webhook_latency_seconds_count{webhook="/dry-run"}"#),
        "{rendered}"
    );
    assert!(
        rendered.contains(r#"controller_runtime_webhook_requests_in_flight{webhook="/dry-run"} 0"#),
        "{rendered}"
    );
}

#[test]
fn registering_a_path_twice_or_a_relative_path_is_an_error() {
    let server = WebhookServer::new(rudder_webhook::Options::new());
    assert!(server.is_empty());
    server
        .register("/a", Webhook::admission(DryRunEcho))
        .unwrap();
    let error = server
        .register("/a", Webhook::admission(Panics))
        .unwrap_err();
    assert!(
        matches!(error, RegisterError::DuplicatePath { ref path } if path == "/a"),
        "{error}"
    );
    let error = server
        .register("b", Webhook::admission(Panics))
        .unwrap_err();
    assert!(
        matches!(error, RegisterError::InvalidPath { .. }),
        "{error}"
    );
    assert_eq!(server.paths(), ["/a"]);
    assert!(!server.is_empty());
}
