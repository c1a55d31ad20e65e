//! Bad clients do not stop good ones: garbage TLS bytes, many idle connections and
//! oversized bodies, all while normal requests keep being answered; and a property test of
//! review decoding (arbitrary bytes and arbitrary JSON: no panic, a well-formed answer).

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Client, Served, register_allow as register, review, serve};
use http::StatusCode;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use proptest::prelude::*;
use rudder_webhook::{Webhook, mutate_path, validate_path};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn a_review(uid: &str) -> Value {
    review(
        uid,
        "CREATE",
        ("", "v1", "ConfigMap"),
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})),
        None,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_tls_idle_connections_and_big_bodies_do_not_stop_normal_requests() {
    let served = serve(
        |options| options.max_body_size(1024 * 1024).max_connections(256),
        register,
    )
    .await;
    let addr = served.running.local_addr();

    // 100 connections that connect and say nothing.
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // 20 connections that send bytes that are not TLS.
    let mut garbage = Vec::new();
    for i in 0..20u8 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let junk: Vec<u8> = (0..512u32)
            .map(|j| (j as u8).wrapping_mul(31).wrapping_add(i))
            .collect();
        let _ = stream.write_all(&junk).await;
        garbage.push(stream);
    }
    // 5 clients with bodies over the limit, in parallel with everything else.
    let mut big = Vec::new();
    for i in 0..5 {
        let ca = served.ca.der.clone();
        big.push(tokio::spawn(async move {
            let mut client = Client::connect(addr, &ca).await.unwrap();
            let body = vec![b' '; 2 * 1024 * 1024 + i];
            client.post("/allow", "application/json", body).await
        }));
    }

    // Meanwhile, normal requests are answered, each on a fresh connection.
    for i in 0..20 {
        let mut client = Client::connect(addr, &served.ca.der).await.unwrap();
        let answer = client.review("/allow", &a_review(&format!("ok-{i}"))).await;
        assert_eq!(answer["response"]["allowed"], true);
        assert_eq!(answer["response"]["uid"], format!("ok-{i}"));
    }
    for handle in big {
        // The server answers 413, or closes the connection while the client still sends.
        if let Ok((status, _)) = handle.await.unwrap() {
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        }
    }
    served.running.check_ready().await.unwrap();
    drop((idle, garbage));
}

#[tokio::test]
async fn a_slow_handshake_is_cut_at_the_tls_handshake_timeout() {
    let served = serve(
        |options| options.tls_handshake_timeout(Duration::from_millis(200)),
        register,
    )
    .await;
    let mut silent = TcpStream::connect(served.running.local_addr())
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(
        common::WAIT,
        tokio::io::AsyncReadExt::read(&mut silent, &mut buf),
    )
    .await
    .expect("the server closes a connection that never completes its handshake");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(started.elapsed() >= Duration::from_millis(150));
}

/// A served admission endpoint on one keep-alive connection, shared by the property
/// cases (each case is one request).
struct Fixture {
    runtime: tokio::runtime::Runtime,
    client: tokio::sync::Mutex<Client>,
    _served: Served,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: std::sync::OnceLock<Fixture> = std::sync::OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (served, client) = runtime.block_on(async {
            let served = serve(
                |options| options,
                |server| {
                    register(server);
                    server
                        .register(
                            validate_path::<k8s_openapi::api::core::v1::ConfigMap>(),
                            Webhook::validator(Anything),
                        )
                        .unwrap();
                    server
                        .register(
                            mutate_path::<k8s_openapi::api::core::v1::ConfigMap>(),
                            Webhook::defaulter(MarkData),
                        )
                        .unwrap();
                },
            )
            .await;
            let client = served.client().await;
            (served, client)
        });
        Fixture {
            runtime,
            client: tokio::sync::Mutex::new(client),
            _served: served,
        }
    })
}

struct Anything;

impl rudder_webhook::admission::Validator<k8s_openapi::api::core::v1::ConfigMap> for Anything {}

/// Adds a data key (and replaces one, when there): the patch must touch only those.
struct MarkData;

impl rudder_webhook::admission::Defaulter<k8s_openapi::api::core::v1::ConfigMap> for MarkData {
    async fn default(
        &self,
        config_map: &mut k8s_openapi::api::core::v1::ConfigMap,
        _request: &AdmissionRequest<DynamicObject>,
    ) -> Result<rudder_webhook::admission::Warnings, rudder_webhook::admission::Denial> {
        let data = config_map.data.get_or_insert_with(Default::default);
        data.insert("marked".to_owned(), "yes".to_owned());
        if let Some(value) = data.get_mut("a") {
            value.push('!');
        }
        Ok(Vec::new())
    }
}

/// Posts `body` to `path` and checks the answer is well formed: HTTP 400 for a body that
/// is not JSON, otherwise HTTP 200 with an AdmissionReview whose response has a uid string
/// and an allowed flag (and a 400 status when it was not a review).
fn check_answer(path: &str, body: Vec<u8>) -> Result<(), TestCaseError> {
    let fixture = fixture();
    let is_json = serde_json::from_slice::<Value>(&body).is_ok();
    let (status, answer) = fixture
        .runtime
        .block_on(async {
            let mut client = fixture.client.lock().await;
            client.post(path, "application/json", body).await
        })
        .map_err(|error| TestCaseError::fail(format!("request failed: {error}")))?;
    if !is_json {
        prop_assert_eq!(status, StatusCode::BAD_REQUEST);
        return Ok(());
    }
    prop_assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&answer)
        .map_err(|error| TestCaseError::fail(format!("answer is not JSON: {error}")))?;
    prop_assert_eq!(&answer["kind"], "AdmissionReview");
    let api_version = answer["apiVersion"].as_str().unwrap_or_default();
    prop_assert!(api_version == "admission.k8s.io/v1" || api_version == "admission.k8s.io/v1beta1");
    let response = &answer["response"];
    prop_assert!(response["uid"].is_string());
    prop_assert!(response["allowed"].is_boolean());
    if response["allowed"] == false {
        prop_assert!(response["status"]["code"].is_u64());
    }
    Ok(())
}

/// An object nested deeper than JSON is read for the patch (128 levels, in a field the
/// ConfigMap type does not have, so it still decodes as one) is refused with code 400 and
/// its uid, and the server goes on answering.
#[test]
fn a_too_deep_object_is_refused_with_a_400() {
    let deep = "[".repeat(300) + &"]".repeat(300);
    let body = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"deep","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},"resource":{{"group":"","version":"v1","resource":"configmaps"}},"operation":"CREATE","userInfo":{{"username":"a"}},"object":{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"a"}},"nested":{deep}}}}}}}"#
    );
    let fixture = fixture();
    let post = |body: Vec<u8>| {
        fixture.runtime.block_on(async {
            let mut client = fixture.client.lock().await;
            client
                .post("/mutate--v1-configmap", "application/json", body)
                .await
                .unwrap()
        })
    };
    let (status, answer) = post(body.into_bytes());
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["response"]["uid"], "deep");
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 400, "{answer}");
    let message = answer["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.starts_with("cannot read the object"), "{message}");
    let (status, _) = post(serde_json::to_vec(&a_review("after")).unwrap());
    assert_eq!(status, StatusCode::OK);
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[a-zA-Z0-9/._-]{0,12}".prop_map(Value::String),
        Just(json!("CREATE")),
        Just(json!("admission.k8s.io/v1")),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("apiVersion".to_owned()),
                    Just("kind".to_owned()),
                    Just("request".to_owned()),
                    Just("uid".to_owned()),
                    Just("object".to_owned()),
                    Just("operation".to_owned()),
                    Just("metadata".to_owned()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..5
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A real review with one part replaced by arbitrary JSON.
fn mangled_review() -> impl Strategy<Value = Value> {
    let pointers = prop_oneof![
        Just("/request"),
        Just("/request/uid"),
        Just("/request/kind"),
        Just("/request/operation"),
        Just("/request/object"),
        Just("/request/object/metadata"),
        Just("/request/object/data"),
        Just("/request/oldObject"),
        Just("/request/userInfo"),
        Just("/request/dryRun"),
        Just("/apiVersion"),
        Just("/kind"),
    ];
    (pointers, arbitrary_json()).prop_map(|(pointer, replacement)| {
        let mut review = a_review("mangled");
        if let Some(slot) = review.pointer_mut(pointer) {
            *slot = replacement;
        }
        review
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_get_a_well_formed_answer(body in prop::collection::vec(any::<u8>(), 1..512)) {
        check_answer("/allow", body)?;
    }

    #[test]
    fn arbitrary_json_gets_a_well_formed_answer(value in arbitrary_json()) {
        check_answer("/allow", serde_json::to_vec(&value).unwrap())?;
    }

    #[test]
    fn mangled_reviews_get_a_well_formed_answer(value in mangled_review()) {
        let body = serde_json::to_vec(&value).unwrap();
        check_answer("/allow", body.clone())?;
        check_answer("/validate--v1-configmap", body.clone())?;
        check_answer("/mutate--v1-configmap", body)?;
    }

    /// A ConfigMap with any data and any fields a ConfigMap does not have: the defaulting
    /// patch applies to the object as sent, adds and changes what the defaulter did, and
    /// keeps everything else, unknown fields included.
    #[test]
    fn a_defaulting_patch_applies_and_changes_only_what_the_defaulter_did(
        data in prop::collection::btree_map("[a-c]{1,2}|k\\.x/y~z|\u{e9}\"", "[ -~\u{e9}]{0,8}", 0..6),
        unknown in arbitrary_json(),
    ) {
        let object = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default"},
            "data": data,
            "someday": unknown,
        });
        let mut body = a_review("patched");
        body["request"]["object"] = object.clone();
        let fixture = fixture();
        let (status, answer) = fixture
            .runtime
            .block_on(async {
                let mut client = fixture.client.lock().await;
                client.post("/mutate--v1-configmap", "application/json", serde_json::to_vec(&body).unwrap()).await
            })
            .map_err(|error| TestCaseError::fail(format!("request failed: {error}")))?;
        prop_assert_eq!(status, StatusCode::OK);
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        prop_assert_eq!(&answer["response"]["allowed"], true);
        let patch = common::wire_patch(&answer);
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        let mut expected = object;
        expected["data"]["marked"] = json!("yes");
        if let Some(a) = expected["data"].get("a").and_then(Value::as_str).map(str::to_owned) {
            expected["data"]["a"] = json!(format!("{a}!"));
        }
        prop_assert_eq!(patched, expected);
    }
}
