//! The answer as written on the wire: an `AdmissionReview` in Go's JSON form, whose patch
//! (Go's `[]byte`, `format: byte` in the API's schema) is a base64 string.

use std::collections::HashMap;

use k8s_openapi::ByteString;
use kube::core::Status;
use kube::core::admission::AdmissionResponse;
use serde::Serialize;

/// The JSON of the review answering with `response`, in the response's API version.
///
/// kube-core's own `Serialize` writes the patch (a `Vec<u8>`) as an array of numbers. The
/// API server's Go decoder happens to read that too, but a client following the schema does
/// not, and the answer grows threefold, so the review is written here with the patch in
/// base64, as controller-runtime writes it. `patchType` goes with a patch and only with one
/// (JSON Patch is the only type there is); an empty patch is left out, as Go's
/// `omitempty` leaves it out.
pub(crate) fn encode(mut response: AdmissionResponse) -> serde_json::Result<Vec<u8>> {
    let patch = response
        .patch
        .take()
        .filter(|patch| !patch.is_empty())
        .map(ByteString);
    let review = Review {
        api_version: &response.types.api_version,
        kind: &response.types.kind,
        response: Response {
            uid: &response.uid,
            allowed: response.allowed,
            status: &response.result,
            patch_type: patch.as_ref().map(|_| JSON_PATCH),
            patch,
            audit_annotations: &response.audit_annotations,
            warnings: response.warnings.as_deref(),
        },
    };
    serde_json::to_vec(&review)
}

/// The only patch type the API server takes.
const JSON_PATCH: &str = "JSONPatch";

/// `admission.k8s.io/v1` (and `v1beta1`) `AdmissionReview`, answer side.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    api_version: &'a str,
    kind: &'a str,
    response: Response<'a>,
}

/// `AdmissionResponse`, with the fields kube-core's type carries.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    uid: &'a str,
    allowed: bool,
    status: &'a Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<ByteString>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    audit_annotations: &'a HashMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a [String]>,
}

#[cfg(test)]
mod tests {
    use kube::core::admission::AdmissionReview;
    use kube::core::{DynamicObject, TypeMeta};
    use serde_json::{Value, json};

    use super::*;

    fn response() -> AdmissionResponse {
        let mut response = AdmissionResponse::invalid("x");
        response.allowed = true;
        response.result = Status::default();
        response.uid = "u-1".to_owned();
        response.types = TypeMeta {
            api_version: "admission.k8s.io/v1".to_owned(),
            kind: "AdmissionReview".to_owned(),
        };
        response
    }

    fn written(response: AdmissionResponse) -> Value {
        let json = encode(response).unwrap();
        serde_json::from_slice(&json).unwrap()
    }

    #[test]
    fn the_patch_is_base64_with_its_type() {
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "add", "path": "/data/a", "value": "b"}
        ]))
        .unwrap();
        let mut response = response().with_patch(patch).unwrap();
        response.warnings = Some(vec!["w".to_owned()]);
        response
            .audit_annotations
            .insert("k".to_owned(), "v".to_owned());
        let review = written(response);
        assert_eq!(
            review,
            json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": "u-1",
                    "allowed": true,
                    "status": serde_json::to_value(Status::default()).unwrap(),
                    // base64 of [{"op":"add","path":"/data/a","value":"b"}]
                    "patch": "W3sib3AiOiJhZGQiLCJwYXRoIjoiL2RhdGEvYSIsInZhbHVlIjoiYiJ9XQ==",
                    "patchType": "JSONPatch",
                    "auditAnnotations": {"k": "v"},
                    "warnings": ["w"],
                }
            })
        );
    }

    #[test]
    fn no_patch_no_type_and_empty_fields_left_out() {
        for patch in [None, Some(Vec::new())] {
            let mut response = response();
            response.patch = patch;
            let review = written(response);
            let mut fields: Vec<&str> = review["response"]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            fields.sort_unstable();
            assert_eq!(fields, ["allowed", "status", "uid"]);
        }
    }

    /// Everything but the patch's encoding is what kube-core writes: its decoder reads the
    /// answer back as it was.
    #[test]
    fn kube_core_reads_the_rest_back_unchanged() {
        let mut response = response();
        response.allowed = false;
        response.result = Status::failure("no", "Forbidden").with_code(403);
        response.warnings = Some(vec!["careful".to_owned()]);
        let json = encode(response.clone()).unwrap();
        let review: AdmissionReview<DynamicObject> = serde_json::from_slice(&json).unwrap();
        assert_eq!(review.types, response.types);
        // The response's own copy of the types is not on the wire.
        response.types = TypeMeta::default();
        assert_eq!(review.response, Some(response));
    }
}
