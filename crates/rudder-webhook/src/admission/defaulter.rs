//! [`Defaulter`]: typed defaulting, and [`Defaulting`], its adapter to an
//! [`AdmissionHandler`].

use std::future::Future;
use std::marker::PhantomData;

use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::{DynamicObject, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::patch::patch_between;
use super::tree::Tree;
use super::{
    AdmissionHandler, Denial, JsonObjectsHandler, JsonRequest, Warnings, allowed, decode_object,
    errored,
};

/// Sets defaults on a `K` being created or updated (a mutating webhook).
///
/// The object is decoded from the request as `K` and handed over mutably; the answer is a
/// JSON patch from the object received to the defaulted one that never removes fields `K`
/// does not know (see [`defaulting_patch`](crate::admission::defaulting_patch)). Returning
/// a [`Denial`] refuses the object instead. Deletes and connects are allowed without a
/// call.
pub trait Defaulter<K>: Send + Sync + 'static {
    /// Defaults `object`. `request` is the rest of the admission request (operation,
    /// user, `dry_run`; its `object` and `old_object` are taken out); a defaulter with side
    /// effects must make none when `request.dry_run` is set.
    fn default(
        &self,
        object: &mut K,
        request: &AdmissionRequest<DynamicObject>,
    ) -> impl Future<Output = Result<Warnings, Denial>> + Send;
}

/// The [`AdmissionHandler`] for a [`Defaulter`]: what
/// [`Webhook::defaulter`](crate::Webhook::defaulter) serves.
pub struct Defaulting<K, D> {
    defaulter: D,
    kind: PhantomData<fn() -> K>,
}

impl<K, D> Defaulting<K, D> {
    /// Wraps `defaulter`.
    pub fn new(defaulter: D) -> Self {
        Self {
            defaulter,
            kind: PhantomData,
        }
    }
}

impl<K, D> AdmissionHandler for Defaulting<K, D>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Send + Sync + 'static,
    D: Defaulter<K>,
{
    async fn handle(&self, mut request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        request.old_object = None;
        let object = match request
            .object
            .take()
            .map(|object| serde_json::to_vec(&object))
        {
            Some(Ok(json)) => Some(json),
            Some(Err(error)) => {
                return errored(
                    Some(&request),
                    400,
                    format!("cannot encode the object: {error}"),
                );
            }
            None => None,
        };
        self.handle_json(JsonRequest::with_objects(request, object, None))
            .await
    }
}

impl<K, D> JsonObjectsHandler for Defaulting<K, D>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Send + Sync + 'static,
    D: Defaulter<K>,
{
    async fn handle_json(&self, json: JsonRequest) -> AdmissionResponse {
        let request = &json.request;
        if matches!(request.operation, Operation::Delete | Operation::Connect) {
            return allowed(request);
        }
        let Some(original) = json.object() else {
            return allowed(request);
        };
        let mut typed: Box<K> = match decode_object(request, original, "object") {
            Ok(typed) => Box::new(typed),
            Err(response) => return *response,
        };
        let before = match serde_json::to_vec(&typed) {
            Ok(json) => json,
            Err(error) => {
                return errored(
                    Some(request),
                    500,
                    format!("cannot encode the object: {error}"),
                );
            }
        };
        // Boxed: the defaulter's future is the user's, of any size (see `serve`).
        let warnings = match Box::pin(self.defaulter.default(&mut typed, request)).await {
            Ok(warnings) => warnings,
            Err(denial) => return denial.into_response(request),
        };
        let after = match serde_json::to_vec(&typed) {
            Ok(json) => json,
            Err(error) => {
                return errored(
                    Some(request),
                    500,
                    format!("cannot encode the defaulted object: {error}"),
                );
            }
        };
        let mut response = allowed(request);
        if !warnings.is_empty() {
            response.warnings = Some(warnings);
        }
        if before == after {
            // Encoded the same before and after: nothing to patch.
            return response;
        }
        // The object as received decoded as `K`, so it is JSON; it can still be deeper than
        // a tree is read (a 400, as any object that does not decode). The two encodings are
        // ours: if they cannot be read, that is this server's failure (a 500).
        let original = match Tree::parse(original) {
            Ok(tree) => tree,
            Err(error) => {
                return errored(
                    Some(request),
                    400,
                    format!("cannot read the object: {error}"),
                );
            }
        };
        let (before, after) = match (Tree::parse(&before), Tree::parse(&after)) {
            (Ok(before), Ok(after)) => (before, after),
            (Err(error), _) | (_, Err(error)) => {
                return errored(
                    Some(request),
                    500,
                    format!("cannot read the encoded object back: {error}"),
                );
            }
        };
        let patch = patch_between(&original, &before, &after);
        if patch.0.is_empty() {
            return response;
        }
        match response.with_patch(patch) {
            Ok(response) => response,
            Err(error) => errored(Some(request), 500, error.to_string()),
        }
    }
}
