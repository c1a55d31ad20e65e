//! Admission: the raw [`AdmissionHandler`] trait, the typed [`Defaulter`] and [`Validator`]
//! with their adapters, [`Denial`]s, and decoding and answering reviews.

mod defaulter;
mod denial;
mod patch;
mod tree;
mod validator;
mod wire;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use http::StatusCode;
use hyper::body::Bytes;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, Status, TypeMeta};
use serde_json::value::RawValue;

pub use self::defaulter::{Defaulter, Defaulting};
pub use self::denial::{Denial, FieldError, Warnings};
pub use self::patch::defaulting_patch;
pub use self::validator::{Validating, Validator};
use rudder_core::panic_message;

use crate::error::Rejection;
use crate::metrics;

/// The admission review API version answered when a request's is unknown.
pub const ADMISSION_V1: &str = "admission.k8s.io/v1";
/// The older admission review API version, still accepted and echoed.
pub const ADMISSION_V1BETA1: &str = "admission.k8s.io/v1beta1";

/// Answers admission requests: a review's request in, its response out.
///
/// The server decodes the review (an undecodable one is answered `allowed: false` with code
/// 400 without calling the handler), calls the handler, and writes the response in the
/// review's own API version, with the request's uid. A handler that panics is answered
/// with code 500 and counted in `controller_runtime_webhook_panics_total`.
///
/// The typed [`Defaulting`] and [`Validating`] adapters are handlers too.
pub trait AdmissionHandler: Send + Sync + 'static {
    /// Decides on `request`. Start from [`allowed`] (or [`Denial::into_response`]) to get
    /// the uid and API version right.
    fn handle(
        &self,
        request: AdmissionRequest<DynamicObject>,
    ) -> impl Future<Output = AdmissionResponse> + Send;
}

/// What the typed adapters implement besides [`AdmissionHandler`]: the request with its
/// objects as the JSON received, so that they are decoded once, as `K`.
pub(crate) trait JsonObjectsHandler: Send + Sync + 'static {
    fn handle_json(&self, request: JsonRequest) -> impl Future<Output = AdmissionResponse> + Send;
}

/// An allowing response to `request` (uid and API version copied).
pub fn allowed<T: kube::core::Resource>(request: &AdmissionRequest<T>) -> AdmissionResponse {
    AdmissionResponse::from(request)
}

/// An erroring response: `allowed: false` with `code` and `message`, for a request that
/// could not be handled (400 for one that does not decode, 500 for a handler that failed).
pub fn errored(
    request: Option<&AdmissionRequest<DynamicObject>>,
    code: u16,
    message: impl Into<String>,
) -> AdmissionResponse {
    let message = message.into();
    let mut response = match request {
        Some(request) => AdmissionResponse::from(request),
        None => AdmissionResponse::invalid(&message),
    };
    response.allowed = false;
    response.result = Status::failure(&message, reason_for(code)).with_code(code);
    response
}

fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        403 => "Forbidden",
        422 => "Invalid",
        500 => "InternalError",
        _ => "",
    }
}

/// Decodes one review, calls the handler, and encodes its answer. `Err` is an HTTP-level
/// refusal (the body is not JSON at all).
pub(crate) async fn serve<H: AdmissionHandler>(
    handler: Arc<H>,
    body: Bytes,
) -> Result<Bytes, Rejection> {
    // The handler's future is the user's, of any size: boxed so that no frame of the
    // server's grows with it (in a debug build every move of a future is a stack slot).
    answer(decode(&body), |request| async move {
        Box::pin(handler.handle(request)).await
    })
    .await
}

/// [`serve`] for the typed adapters: the objects are handed over as the JSON received,
/// never decoded as [`DynamicObject`]s (the adapters decode them as `K`, and diff against
/// the JSON).
pub(crate) async fn serve_json<H: JsonObjectsHandler>(
    handler: Arc<H>,
    body: Bytes,
) -> Result<Bytes, Rejection> {
    answer(decode_json(&body), |decoded| async move {
        handler.handle_json(decoded).await
    })
    .await
}

/// A decoded request: the review's request, and its types and uid for the answer.
trait Decoded {
    fn ids(&self) -> (TypeMeta, String);
}

impl Decoded for AdmissionRequest<DynamicObject> {
    fn ids(&self) -> (TypeMeta, String) {
        (self.types.clone(), self.uid.clone())
    }
}

impl Decoded for JsonRequest {
    fn ids(&self) -> (TypeMeta, String) {
        self.request.ids()
    }
}

/// Calls `handle` on a decoded request (catching a panic), or answers why it did not
/// decode; then encodes the answer.
async fn answer<R, F, Fut>(decoded: Result<R, Undecodable>, handle: F) -> Result<Bytes, Rejection>
where
    R: Decoded,
    F: FnOnce(R) -> Fut,
    Fut: Future<Output = AdmissionResponse>,
{
    let response = match decoded {
        Ok(request) => {
            let (types, uid) = request.ids();
            let handled = AssertUnwindSafe(handle(request)).catch_unwind().await;
            let mut response = match handled {
                Ok(response) => response,
                Err(panic) => {
                    metrics::admission_panic();
                    let message = panic_message(panic.as_ref());
                    tracing::error!(panic = %message, "admission handler panicked");
                    errored(None, 500, format!("panic: {message} [recovered]"))
                }
            };
            // The API server matches answers by uid and reads them in its own version,
            // whatever the handler put there.
            response.uid = uid;
            response.types = types;
            response
        }
        Err(Undecodable::NotJson(error)) => {
            return Err(Rejection {
                status: StatusCode::BAD_REQUEST,
                message: format!("request body is not JSON: {error}"),
            });
        }
        Err(Undecodable::Review {
            types,
            uid,
            message,
        }) => {
            let mut response = errored(None, 400, message);
            response.uid = uid.unwrap_or_default();
            response.types = types;
            response
        }
    };
    encode(response)
}

fn encode(response: AdmissionResponse) -> Result<Bytes, Rejection> {
    wire::encode(response)
        .map(Bytes::from)
        .map_err(|error| Rejection {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("cannot encode the admission response: {error}"),
        })
}

/// Why a body is not an admission request.
#[derive(Debug)]
enum Undecodable {
    /// Not JSON at all: an HTTP 400.
    NotJson(serde_json::Error),
    /// JSON, but not a review this server can answer: `allowed: false`, code 400, with the
    /// uid and API version when the body had them.
    Review {
        types: TypeMeta,
        uid: Option<String>,
        message: String,
    },
}

/// Decodes a review body into its request, or says what to answer instead.
fn decode(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, Undecodable> {
    match serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        Ok(review) => checked(review),
        Err(error) => Err(diagnose(body, &error)),
    }
}

/// A review's request with its objects as the JSON received (`null` is absent); the
/// request's own `object` and `old_object` are `None`.
///
/// The objects are not copied out of the body: they share its bytes, which the adapters
/// decode straight from. The request is boxed, and so are the typed objects
/// the adapters decode: the future that serves a review is itself boxed per request, and
/// holding them inline made it about 14 KiB, allocated and copied for every request.
pub(crate) struct JsonRequest {
    pub(crate) request: Box<AdmissionRequest<DynamicObject>>,
    object: Option<Bytes>,
    old_object: Option<Bytes>,
}

impl JsonRequest {
    /// A request whose objects are given as JSON (for the typed adapters called as raw
    /// handlers, with their objects already decoded).
    pub(crate) fn with_objects(
        request: AdmissionRequest<DynamicObject>,
        object: Option<Vec<u8>>,
        old_object: Option<Vec<u8>>,
    ) -> Self {
        Self {
            request: Box::new(request),
            object: object.map(Bytes::from),
            old_object: old_object.map(Bytes::from),
        }
    }

    /// The object, as the JSON received.
    pub(crate) fn object(&self) -> Option<&[u8]> {
        self.object.as_deref()
    }

    /// The old object, as the JSON received.
    pub(crate) fn old_object(&self) -> Option<&[u8]> {
        self.old_object.as_deref()
    }
}

/// A review as read: its types (any JSON: checked below), and its request with the
/// objects left as text.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(default, rename = "apiVersion", borrow)]
    api_version: Option<&'a RawValue>,
    #[serde(default, borrow)]
    kind: Option<&'a RawValue>,
    #[serde(default, borrow)]
    request: Option<RequestFields<'a>>,
}

/// kube's `AdmissionRequest` with the same fields and rules, except that the objects stay
/// as text.
#[derive(serde::Deserialize)]
#[serde(rename = "AdmissionRequest", rename_all = "camelCase")]
struct RequestFields<'a> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<GroupVersionResource>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: UserInfo,
    #[serde(borrow)]
    object: Option<&'a RawValue>,
    #[serde(borrow)]
    old_object: Option<&'a RawValue>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    options: Option<RawExtension>,
}

/// Decodes a review body, leaving its objects as JSON: the review is read in one pass, the
/// objects are located in the body (not copied), and the rest is decoded into kube's
/// request type. A body that does not decode is read again as a `Value`, to say why and to
/// find the uid to echo.
fn decode_json(body: &Bytes) -> Result<JsonRequest, Undecodable> {
    // JSON is UTF-8, and serde_json skips the strings of fields it ignores without checking
    // them (the fuzzer's `admission_review` found a review with invalid UTF-8 in an unknown
    // field decoded): the body is checked whole first, as `diagnose` reads it.
    let text = match std::str::from_utf8(body) {
        Ok(text) => text,
        Err(error) => {
            return Err(Undecodable::NotJson(serde::de::Error::custom(format!(
                "not UTF-8 at byte {}",
                error.valid_up_to()
            ))));
        }
    };
    let envelope = match serde_json::from_str::<Envelope<'_>>(text) {
        Ok(envelope) => envelope,
        Err(error) => return Err(diagnose(body, &error)),
    };
    // The review's own fields are read directly: kube's `AdmissionReview` flattens its
    // types, which makes serde buffer the whole review before decoding it. A field that is
    // not a string counts as empty (and the review is then refused as unsupported).
    let field = |field: Option<&RawValue>| {
        field
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
            .unwrap_or_default()
    };
    let types = TypeMeta {
        api_version: field(envelope.api_version),
        kind: field(envelope.kind),
    };
    // The objects' text is a slice of the body: shared, not copied.
    let located = |raw: Option<&RawValue>| {
        raw.filter(|raw| raw.get() != "null")
            .map(|raw| body.slice_ref(raw.get().as_bytes()))
    };
    let mut object = None;
    let mut old_object = None;
    let request = envelope.request.map(|fields| {
        object = located(fields.object);
        old_object = located(fields.old_object);
        AdmissionRequest {
            types: TypeMeta::default(),
            uid: fields.uid,
            kind: fields.kind,
            resource: fields.resource,
            sub_resource: fields.sub_resource,
            request_kind: fields.request_kind,
            request_resource: fields.request_resource,
            request_sub_resource: fields.request_sub_resource,
            name: fields.name,
            namespace: fields.namespace,
            operation: fields.operation,
            user_info: fields.user_info,
            object: None,
            old_object: None,
            dry_run: fields.dry_run,
            options: fields.options,
        }
    });
    Ok(JsonRequest {
        request: Box::new(checked(AdmissionReview {
            types,
            request,
            response: None,
        })?),
        object,
        old_object,
    })
}

/// The request of a decoded review, if the review is one this server answers.
fn checked(
    review: AdmissionReview<DynamicObject>,
) -> Result<AdmissionRequest<DynamicObject>, Undecodable> {
    let types = answer_types(&review.types);
    if review.types.kind != "AdmissionReview" || !supported(&review.types.api_version) {
        return Err(Undecodable::Review {
            uid: review.request.as_ref().map(|request| request.uid.clone()),
            types,
            message: format!(
                "unsupported review {}/{}: expected AdmissionReview in {ADMISSION_V1} or {ADMISSION_V1BETA1}",
                review.types.api_version, review.types.kind
            ),
        });
    }
    match review.request {
        Some(mut request) => {
            request.types = types;
            Ok(request)
        }
        None => Err(Undecodable::Review {
            types,
            uid: None,
            message: "the admission review has no request".to_owned(),
        }),
    }
}

/// For a body that did not decode as a review: is it JSON at all, and which uid and
/// version can still be echoed?
fn diagnose(body: &[u8], error: &serde_json::Error) -> Undecodable {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(value) => undecodable_review(&value, error),
        Err(not_json) => Undecodable::NotJson(not_json),
    }
}

/// The answer to JSON that is not a review: the uid and version it has, and why.
fn undecodable_review(value: &serde_json::Value, error: &serde_json::Error) -> Undecodable {
    let api_version = value
        .get("apiVersion")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let uid = value
        .pointer("/request/uid")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    Undecodable::Review {
        types: answer_types(&TypeMeta {
            api_version: api_version.to_owned(),
            kind: String::new(),
        }),
        uid,
        message: format!("cannot decode the admission review: {error}"),
    }
}

fn supported(api_version: &str) -> bool {
    api_version == ADMISSION_V1 || api_version == ADMISSION_V1BETA1
}

/// The API version and kind to answer in: the request's, when it is one this server
/// speaks, else v1.
fn answer_types(request: &TypeMeta) -> TypeMeta {
    let api_version = if supported(&request.api_version) {
        request.api_version.clone()
    } else {
        ADMISSION_V1.to_owned()
    };
    TypeMeta {
        api_version,
        kind: "AdmissionReview".to_owned(),
    }
}

/// Decodes a request's object (its JSON) as `K`, or the 400 answer saying why it does not
/// decode.
pub(crate) fn decode_object<K: serde::de::DeserializeOwned>(
    request: &AdmissionRequest<DynamicObject>,
    object: &[u8],
    which: &str,
) -> Result<K, Box<AdmissionResponse>> {
    serde_json::from_slice(object).map_err(|error| {
        Box::new(errored(
            Some(request),
            400,
            format!(
                "cannot decode the {which} as {}: {error}",
                request.kind.kind
            ),
        ))
    })
}

/// Internals the fuzz targets under `fuzz/` drive, in builds with `--cfg fuzzing` only
/// (cargo-fuzz sets it): not part of the API, and absent from every other build.
#[cfg(fuzzing)]
#[doc(hidden)]
#[allow(missing_docs)]
pub mod fuzzing {
    use hyper::body::Bytes;
    use serde_json::Value;

    use super::patch::patch_between;
    use super::tree::Tree;

    /// The review parser's document reader ([`Tree::parse`]), its document as a `Value`.
    pub fn parse_tree(json: &[u8]) -> Result<Value, String> {
        Tree::parse(json)
            .map(|tree| tree.to_value())
            .map_err(|error| error.to_string())
    }

    /// A review body decoded as the server decodes it: the object and the old object as
    /// the JSON text received (`None` when absent or `null`), or why it was refused.
    pub fn review_objects(body: &[u8]) -> Result<(Option<Vec<u8>>, Option<Vec<u8>>), String> {
        match super::decode_json(&Bytes::copy_from_slice(body)) {
            Ok(request) => Ok((
                request.object().map(<[u8]>::to_vec),
                request.old_object().map(<[u8]>::to_vec),
            )),
            Err(_) => Err("undecodable".to_owned()),
        }
    }

    /// The defaulting patch as the server builds it, from the three documents' bytes read
    /// as [`Tree`]s; `None` if one of them does not parse.
    pub fn tree_patch(original: &[u8], before: &[u8], after: &[u8]) -> Option<json_patch::Patch> {
        let original = Tree::parse(original).ok()?;
        let before = Tree::parse(before).ok()?;
        let after = Tree::parse(after).ok()?;
        Some(patch_between(&original, &before, &after))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    struct Nothing;

    impl Defaulter<Pod> for Nothing {
        async fn default(
            &self,
            _pod: &mut Pod,
            _request: &AdmissionRequest<DynamicObject>,
        ) -> Result<Warnings, Denial> {
            Ok(Vec::new())
        }
    }

    /// The future serving a review is boxed for every request: the request and the typed
    /// object stay on the heap, so the box is small (it was 14 KiB with them inline for a
    /// Pod: a large allocation and copy per request).
    #[test]
    fn the_future_serving_a_review_stays_small() {
        let handler = Arc::new(Defaulting::<Pod, Nothing>::new(Nothing));
        let future = serve_json(handler, Bytes::new());
        let size = size_of_val(&future);
        assert!(size <= 2048, "{size} bytes");
    }

    const REQUEST: &str = r#""uid":"u-1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"UPDATE","userInfo":{"username":"a"}"#;

    fn review(api_version: &str, request: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"kind":"AdmissionReview","apiVersion":{api_version},"request":{request}}}"#
        ))
    }

    fn refusal(decoded: Result<JsonRequest, Undecodable>) -> (TypeMeta, Option<String>, String) {
        match decoded {
            Ok(request) => panic!("decoded: {:?}", request.request),
            Err(Undecodable::NotJson(error)) => panic!("not JSON: {error}"),
            Err(Undecodable::Review {
                types,
                uid,
                message,
            }) => (types, uid, message),
        }
    }

    #[test]
    fn objects_are_located_in_the_body_as_sent() {
        let object = r#"{"metadata":{"name":"a\"b","labels":{"k":"\u00e9"}}, "spec" : [1, 2.5]}"#;
        let body = review(
            r#""admission.k8s.io/v1""#,
            &format!(r#"{{{REQUEST},"object":{object},"oldObject":null,"dryRun":true}}"#),
        );
        let decoded = match decode_json(&body) {
            Ok(decoded) => decoded,
            Err(error) => panic!("{error:?}"),
        };
        assert_eq!(decoded.object(), Some(object.as_bytes()));
        assert_eq!(decoded.old_object(), None, "null is absent");
        assert_eq!(decoded.request.uid, "u-1");
        assert_eq!(decoded.request.operation, Operation::Update);
        assert!(decoded.request.dry_run);
        assert!(decoded.request.object.is_none() && decoded.request.old_object.is_none());
        assert_eq!(decoded.request.types.api_version, ADMISSION_V1);

        let both = review(
            r#""admission.k8s.io/v1beta1""#,
            &format!(r#"{{{REQUEST},"oldObject":{{"b":1}},"object":{{"a":[]}}}}"#),
        );
        let decoded = match decode_json(&both) {
            Ok(decoded) => decoded,
            Err(error) => panic!("{error:?}"),
        };
        assert_eq!(decoded.object(), Some(&br#"{"a":[]}"#[..]));
        assert_eq!(decoded.old_object(), Some(&br#"{"b":1}"#[..]));
        assert_eq!(decoded.request.types.api_version, ADMISSION_V1BETA1);
    }

    #[test]
    fn a_review_with_invalid_utf8_anywhere_is_not_json() {
        // Found by fuzz/'s admission_review: invalid UTF-8 in a field the review ignores
        // was skipped unchecked, and the review decoded.
        let body = review(
            r#""admission.k8s.io/v1""#,
            &format!(r#"{{{REQUEST},"unknownField":"deXXfault","object":{{"a":1}}}}"#),
        );
        assert!(decode_json(&body).is_ok());
        let mut body = body.to_vec();
        let at = body.windows(2).position(|w| w == b"XX").unwrap();
        body[at..at + 2].copy_from_slice(&[0xe9, 0xff]);
        assert!(matches!(
            decode_json(&Bytes::from(body)),
            Err(Undecodable::NotJson(_))
        ));
    }

    #[test]
    fn reviews_that_cannot_be_answered_say_why_with_what_can_be_echoed() {
        // An apiVersion that is not a string: unsupported, answered in v1.
        let (types, uid, message) = refusal(decode_json(&review("5", &format!("{{{REQUEST}}}"))));
        assert_eq!(
            (types.api_version.as_str(), uid.as_deref()),
            (ADMISSION_V1, Some("u-1"))
        );
        assert!(message.contains("unsupported review"), "{message}");
        // No request, or a null one.
        for request in ["null", r#"null, "other": 1"#] {
            let (_, uid, message) =
                refusal(decode_json(&review(r#""admission.k8s.io/v1""#, request)));
            assert_eq!(uid, None);
            assert!(message.contains("has no request"), "{message}");
        }
        // A request that does not decode: its uid is still echoed.
        let broken = REQUEST.replace("UPDATE", "EXPLODE");
        let (_, uid, message) = refusal(decode_json(&review(
            r#""admission.k8s.io/v1""#,
            &format!("{{{broken}}}"),
        )));
        assert_eq!(uid.as_deref(), Some("u-1"));
        assert!(
            message.contains("cannot decode the admission review"),
            "{message}"
        );
        // A request that is not an object.
        let (_, uid, _) = refusal(decode_json(&review(r#""admission.k8s.io/v1""#, "[1]")));
        assert_eq!(uid, None);
        // Not JSON at all.
        assert!(matches!(
            decode_json(&Bytes::from_static(b"{\"kind\":")),
            Err(Undecodable::NotJson(_))
        ));
    }
}
