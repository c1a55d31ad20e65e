//! [`Webhook`]: what is served at one path: an admission handler or the conversions.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;

use hyper::body::Bytes;
use kube::core::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::admission::{
    self, AdmissionHandler, Defaulter, Defaulting, JsonObjectsHandler, Validating, Validator,
};
use crate::conversion::Conversions;
use crate::error::Rejection;

/// What a webhook's call resolves to: the answer's body, or a refusal of the request.
pub(crate) type Answer = Pin<Box<dyn Future<Output = Result<Bytes, Rejection>> + Send>>;

/// What is served at one path: build one with [`Webhook::admission`],
/// [`Webhook::defaulter`] or [`Webhook::validator`] and hand it to
/// [`WebhookServer::register`](crate::WebhookServer::register). (Conversions are registered
/// with [`WebhookServer::register_conversion`](crate::WebhookServer::register_conversion).)
#[derive(Clone)]
pub struct Webhook {
    endpoint: Endpoint,
}

#[derive(Clone)]
enum Endpoint {
    Admission(Arc<dyn ErasedAdmission>),
    Conversion(Conversions),
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.endpoint {
            Endpoint::Admission(_) => "admission",
            Endpoint::Conversion(_) => "conversion",
        };
        f.debug_struct("Webhook").field("kind", &kind).finish()
    }
}

impl Webhook {
    /// An admission webhook answered by `handler`.
    pub fn admission<H: AdmissionHandler>(handler: H) -> Self {
        Self {
            endpoint: Endpoint::Admission(Arc::new(Erased(Arc::new(handler)))),
        }
    }

    /// A mutating admission webhook for `K`, answered with a JSON patch from the object
    /// received to the one `defaulter` made of it.
    pub fn defaulter<K, D>(defaulter: D) -> Self
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Send + Sync + 'static,
        D: Defaulter<K>,
    {
        Self::typed(Defaulting::new(defaulter))
    }

    /// A validating admission webhook for `K`.
    pub fn validator<K, V>(validator: V) -> Self
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + Send + Sync + 'static,
        V: Validator<K>,
    {
        Self::typed(Validating::new(validator))
    }

    /// A typed adapter, served with the objects left as JSON until it decodes them as its
    /// type (no [`DynamicObject`](kube::core::DynamicObject) in between).
    fn typed<H: JsonObjectsHandler>(handler: H) -> Self {
        Self {
            endpoint: Endpoint::Admission(Arc::new(ErasedJson(Arc::new(handler)))),
        }
    }

    pub(crate) fn conversion(conversions: Conversions) -> Self {
        Self {
            endpoint: Endpoint::Conversion(conversions),
        }
    }

    pub(crate) fn is_conversion(&self) -> bool {
        matches!(self.endpoint, Endpoint::Conversion(_))
    }

    pub(crate) fn call(&self, body: Bytes) -> Answer {
        match &self.endpoint {
            Endpoint::Admission(handler) => handler.call(body),
            Endpoint::Conversion(conversions) => {
                let conversions = conversions.clone();
                Box::pin(async move { conversions.serve(&body) })
            }
        }
    }
}

/// An admission handler behind a trait object.
trait ErasedAdmission: Send + Sync + 'static {
    fn call(&self, body: Bytes) -> Answer;
}

struct Erased<H>(Arc<H>);

impl<H: AdmissionHandler> ErasedAdmission for Erased<H> {
    fn call(&self, body: Bytes) -> Answer {
        Box::pin(admission::serve(Arc::clone(&self.0), body))
    }
}

struct ErasedJson<H>(Arc<H>);

impl<H: JsonObjectsHandler> ErasedAdmission for ErasedJson<H> {
    fn call(&self, body: Bytes) -> Answer {
        Box::pin(admission::serve_json(Arc::clone(&self.0), body))
    }
}
