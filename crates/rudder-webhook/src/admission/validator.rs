//! [`Validator`]: typed validation of creates, updates and deletes, and [`Validating`], its
//! adapter to an [`AdmissionHandler`].

use std::future::Future;
use std::marker::PhantomData;

use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::{DynamicObject, Resource};
use serde::de::DeserializeOwned;

use super::{
    AdmissionHandler, Denial, JsonObjectsHandler, JsonRequest, Warnings, allowed, decode_object,
    errored,
};

/// Validates a `K` being created, updated or deleted (a validating webhook).
///
/// Each method returns warnings to allow (with them), or a [`Denial`] to refuse. A method
/// not implemented allows. `request` is the rest of the admission request (operation,
/// user, `dry_run`; its `object` and `old_object` are taken out).
pub trait Validator<K>: Send + Sync + 'static {
    /// Validates `object` about to be created.
    fn validate_create(
        &self,
        object: &K,
        request: &AdmissionRequest<DynamicObject>,
    ) -> impl Future<Output = Result<Warnings, Denial>> + Send {
        let _ = (object, request);
        async { Ok(Vec::new()) }
    }

    /// Validates the change from `old` to `new`.
    fn validate_update(
        &self,
        old: &K,
        new: &K,
        request: &AdmissionRequest<DynamicObject>,
    ) -> impl Future<Output = Result<Warnings, Denial>> + Send {
        let _ = (old, new, request);
        async { Ok(Vec::new()) }
    }

    /// Validates deleting `object` (as it is before the delete).
    fn validate_delete(
        &self,
        object: &K,
        request: &AdmissionRequest<DynamicObject>,
    ) -> impl Future<Output = Result<Warnings, Denial>> + Send {
        let _ = (object, request);
        async { Ok(Vec::new()) }
    }
}

/// The [`AdmissionHandler`] for a [`Validator`]: what
/// [`Webhook::validator`](crate::Webhook::validator) serves.
pub struct Validating<K, V> {
    validator: V,
    kind: PhantomData<fn() -> K>,
}

impl<K, V> Validating<K, V> {
    /// Wraps `validator`.
    pub fn new(validator: V) -> Self {
        Self {
            validator,
            kind: PhantomData,
        }
    }
}

impl<K, V> AdmissionHandler for Validating<K, V>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Send + Sync + 'static,
    V: Validator<K>,
{
    async fn handle(&self, mut request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let object = take_json(&mut request.object);
        let old_object = take_json(&mut request.old_object);
        self.handle_json(JsonRequest::with_objects(request, object, old_object))
            .await
    }
}

impl<K, V> JsonObjectsHandler for Validating<K, V>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Send + Sync + 'static,
    V: Validator<K>,
{
    async fn handle_json(&self, json: JsonRequest) -> AdmissionResponse {
        let (request, object, old) = (&json.request, json.object(), json.old_object());
        let outcome = match request.operation {
            Operation::Create => {
                let Some(object) = object else {
                    return missing(request, "object");
                };
                let object: Box<K> = match decode_object(request, object, "object") {
                    Ok(object) => Box::new(object),
                    Err(response) => return *response,
                };
                // Boxed: the validator's future is the user's, of any size (see `serve`).
                Box::pin(self.validator.validate_create(&object, request)).await
            }
            Operation::Update => {
                let (Some(object), Some(old)) = (object, old) else {
                    return missing(request, "object and oldObject");
                };
                let new: Box<K> = match decode_object(request, object, "object") {
                    Ok(object) => Box::new(object),
                    Err(response) => return *response,
                };
                let old: Box<K> = match decode_object(request, old, "old object") {
                    Ok(object) => Box::new(object),
                    Err(response) => return *response,
                };
                Box::pin(self.validator.validate_update(&old, &new, request)).await
            }
            Operation::Delete => {
                let Some(old) = old else {
                    return missing(request, "oldObject");
                };
                let old: Box<K> = match decode_object(request, old, "old object") {
                    Ok(object) => Box::new(object),
                    Err(response) => return *response,
                };
                Box::pin(self.validator.validate_delete(&old, request)).await
            }
            Operation::Connect => Ok(Vec::new()),
        };
        match outcome {
            Ok(warnings) => {
                let mut response = allowed(request);
                if !warnings.is_empty() {
                    response.warnings = Some(warnings);
                }
                response
            }
            Err(denial) => denial.into_response(request),
        }
    }
}

fn take_json(object: &mut Option<DynamicObject>) -> Option<Vec<u8>> {
    object
        .take()
        .and_then(|object| serde_json::to_vec(&object).ok())
}

fn missing(request: &AdmissionRequest<DynamicObject>, what: &str) -> AdmissionResponse {
    errored(
        Some(request),
        400,
        format!("the {:?} request has no {what}", request.operation),
    )
}
