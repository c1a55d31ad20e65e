//! Admission: the raw [`AdmissionHandler`] trait, the typed [`Defaulter`] and [`Validator`]
//! with their adapters, [`Denial`]s, and decoding and answering reviews.

mod defaulter;
mod denial;
mod patch;
mod validator;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use http::StatusCode;
use hyper::body::Bytes;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::{DynamicObject, Status, TypeMeta};

pub use self::defaulter::{Defaulter, Defaulting};
pub use self::denial::{Denial, FieldError, Warnings};
pub use self::patch::defaulting_patch;
pub use self::validator::{Validating, Validator};
use crate::metrics;
use crate::server::Rejection;

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
    answer(decode(&body), |request| async move {
        handler.handle(request).await
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
    serde_json::to_vec(&response.into_review())
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
/// The request is boxed, and so are the typed objects the adapters decode: the future
/// that serves a review is itself boxed per request, and holding them inline made it
/// about 14 KiB, allocated and copied for every request.
pub(crate) struct JsonRequest {
    pub(crate) request: Box<AdmissionRequest<DynamicObject>>,
    pub(crate) object: Option<serde_json::Value>,
    pub(crate) old_object: Option<serde_json::Value>,
}

/// Decodes a review body, leaving its objects as JSON: the body is parsed once, the
/// objects are taken out, and only the rest is decoded into kube's request type.
fn decode_json(body: &[u8]) -> Result<JsonRequest, Undecodable> {
    let mut value =
        serde_json::from_slice::<serde_json::Value>(body).map_err(Undecodable::NotJson)?;
    let (object, old_object) = match value
        .get_mut("request")
        .and_then(serde_json::Value::as_object_mut)
    {
        Some(request) => (
            take_object(request, "object"),
            take_object(request, "oldObject"),
        ),
        None => (None, None),
    };
    // The review's own fields are read directly: kube's `AdmissionReview` flattens its
    // types, which makes serde buffer the whole review before decoding it.
    let field = |name: &str| {
        value
            .get(name)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let types = TypeMeta {
        api_version: field("apiVersion"),
        kind: field("kind"),
    };
    let request = match value.get_mut("request").map(serde_json::Value::take) {
        None | Some(serde_json::Value::Null) => None,
        Some(request) => {
            let uid = request
                .get("uid")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned);
            match serde_json::from_value::<AdmissionRequest<DynamicObject>>(request) {
                Ok(request) => Some(request),
                Err(error) => {
                    return Err(Undecodable::Review {
                        types: answer_types(&types),
                        uid,
                        message: format!("cannot decode the admission review: {error}"),
                    });
                }
            }
        }
    };
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

fn take_object(
    request: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Option<serde_json::Value> {
    request.remove(key).filter(|object| !object.is_null())
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

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

/// Decodes a request's object as `K`, or the 400 answer saying why it does not decode.
pub(crate) fn decode_object<K: serde::de::DeserializeOwned>(
    request: &AdmissionRequest<DynamicObject>,
    object: &serde_json::Value,
    which: &str,
) -> Result<K, Box<AdmissionResponse>> {
    K::deserialize(object).map_err(|error| {
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
}
