//! Conversion, hub and spoke: each version of a kind converts to and from one hub version
//! ([`Convertible`]); [`KindConversion`] gathers a kind's spokes; one `/convert` endpoint
//! serves every kind registered.

use std::collections::{BTreeSet, HashMap};
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, RwLock};

use http::StatusCode;
use hyper::body::Bytes;
use kube::core::Resource;
use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use rudder_core::sync::RwLockExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use rudder_core::panic_message;

use crate::error::{RegisterError, Rejection};
use crate::metrics;

/// One version (a spoke) of a kind that converts to and from the kind's hub version `H`.
///
/// Implement it for every version but the hub. Only the fields are converted: the
/// server keeps each object's `metadata` exactly as received and sets `apiVersion`.
pub trait Convertible<H>: Sized {
    /// This version to the hub.
    fn to_hub(self) -> Result<H, ConversionError>;
    /// The hub to this version.
    fn from_hub(hub: H) -> Result<Self, ConversionError>;
}

/// Why an object could not be converted; the message reaches the API server's client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConversionError {
    message: String,
}

impl ConversionError {
    /// A conversion error saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

type Convert = Arc<dyn Fn(Value) -> Result<Value, ConversionError> + Send + Sync>;

/// A kind's conversions: its hub `H` and the spokes converting to and from it. Register
/// it with [`WebhookServer::register_conversion`](crate::WebhookServer::register_conversion).
pub struct KindConversion<H> {
    group: String,
    kind: String,
    hub_version: String,
    spokes: HashMap<String, (Convert, Convert)>,
    mismatched: Vec<String>,
    hub: PhantomData<fn() -> H>,
}

impl<H> KindConversion<H>
where
    H: Resource<DynamicType = ()> + Serialize + DeserializeOwned + 'static,
{
    /// The conversions of `H`'s kind, with `H`'s version as the hub and no spokes yet.
    pub fn hub() -> Self {
        Self {
            group: H::group(&()).into_owned(),
            kind: H::kind(&()).into_owned(),
            hub_version: H::version(&()).into_owned(),
            spokes: HashMap::new(),
            mismatched: Vec::new(),
            hub: PhantomData,
        }
    }

    /// Adds version `S` (of the same group and kind as the hub).
    pub fn spoke<S>(mut self) -> Self
    where
        S: Resource<DynamicType = ()> + Convertible<H> + Serialize + DeserializeOwned + 'static,
    {
        if S::group(&()) != self.group || S::kind(&()) != self.kind {
            self.mismatched
                .push(format!("{}/{}", S::api_version(&()), S::kind(&())));
            return self;
        }
        let to_hub: Convert = Arc::new(|value| {
            let spoke: S = decode(value)?;
            encode(&spoke.to_hub()?)
        });
        let from_hub: Convert = Arc::new(|value| {
            let hub: H = decode(value)?;
            encode(&S::from_hub(hub)?)
        });
        self.spokes
            .insert(S::version(&()).into_owned(), (to_hub, from_hub));
        self
    }
}

impl<H> KindConversion<H> {
    pub(crate) fn into_erased(self) -> Result<ErasedKind, RegisterError> {
        let kind = kind_name(&self.group, &self.kind);
        if let Some(spoke) = self.mismatched.into_iter().next() {
            return Err(RegisterError::SpokeKindMismatch { kind, spoke });
        }
        Ok(ErasedKind {
            group: self.group,
            kind: self.kind,
            hub_version: self.hub_version,
            spokes: self.spokes,
        })
    }
}

impl<H> std::fmt::Debug for KindConversion<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindConversion")
            .field("kind", &kind_name(&self.group, &self.kind))
            .field("hub", &self.hub_version)
            .field("spokes", &self.spokes.keys().collect::<BTreeSet<_>>())
            .finish()
    }
}

fn kind_name(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    }
}

fn decode<T: DeserializeOwned>(value: Value) -> Result<T, ConversionError> {
    serde_json::from_value(value)
        .map_err(|error| ConversionError::new(format!("cannot decode the object: {error}")))
}

fn encode<T: Serialize>(object: &T) -> Result<Value, ConversionError> {
    serde_json::to_value(object)
        .map_err(|error| ConversionError::new(format!("cannot encode the object: {error}")))
}

/// A kind's conversions with the types erased.
pub(crate) struct ErasedKind {
    group: String,
    kind: String,
    hub_version: String,
    spokes: HashMap<String, (Convert, Convert)>,
}

impl ErasedKind {
    pub(crate) fn check_covers(&self, served: &[String]) -> Result<(), RegisterError> {
        let uncovered: Vec<String> = served
            .iter()
            .filter(|version| **version != self.hub_version && !self.spokes.contains_key(*version))
            .cloned()
            .collect();
        if uncovered.is_empty() {
            Ok(())
        } else {
            Err(RegisterError::UncoveredVersions {
                kind: kind_name(&self.group, &self.kind),
                hub: self.hub_version.clone(),
                versions: uncovered,
            })
        }
    }

    fn convert(&self, object: Value, from: &str, to: &str) -> Result<Value, ConversionError> {
        // The conversions see the metadata (a name for a message, say), but what they
        // return for it is dropped: the API server requires it unchanged.
        let metadata = object.get("metadata").cloned();
        let hub = if from == self.hub_version {
            object
        } else {
            let (to_hub, _) = self.spokes.get(from).ok_or_else(|| {
                ConversionError::new(format!("no conversion from version {from}"))
            })?;
            to_hub(object)?
        };
        let mut converted = if to == self.hub_version {
            hub
        } else {
            let (_, from_hub) = self
                .spokes
                .get(to)
                .ok_or_else(|| ConversionError::new(format!("no conversion to version {to}")))?;
            from_hub(hub)?
        };
        let Some(map) = converted.as_object_mut() else {
            return Err(ConversionError::new("a conversion produced a non-object"));
        };
        map.insert(
            "apiVersion".to_owned(),
            Value::String(api_version(&self.group, to)),
        );
        map.insert("kind".to_owned(), Value::String(self.kind.clone()));
        match metadata {
            Some(metadata) => map.insert("metadata".to_owned(), metadata),
            None => map.remove("metadata"),
        };
        Ok(converted)
    }
}

fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.rsplit_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    }
}

/// Registered kinds by (group, kind).
type KindTable = HashMap<(String, String), Arc<ErasedKind>>;

/// Every registered kind's conversions, served at `/convert`.
#[derive(Clone, Default)]
pub(crate) struct Conversions {
    kinds: Arc<RwLock<KindTable>>,
}

impl std::fmt::Debug for Conversions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversions").finish_non_exhaustive()
    }
}

impl Conversions {
    pub(crate) fn insert(&self, kind: ErasedKind) -> Result<(), RegisterError> {
        let mut kinds = self.kinds.write_unpoisoned();
        let key = (kind.group.clone(), kind.kind.clone());
        if kinds.contains_key(&key) {
            return Err(RegisterError::DuplicateConversion {
                kind: kind_name(&kind.group, &kind.kind),
            });
        }
        kinds.insert(key, Arc::new(kind));
        Ok(())
    }

    /// Answers one conversion review body: `Err` for a body that is not a review (HTTP
    /// 400), otherwise a review whose result is `Success` with every object converted in
    /// order, or `Failure` with a message.
    pub(crate) fn serve(&self, body: &[u8]) -> Result<Bytes, Rejection> {
        let review: ConversionReview = serde_json::from_slice(body).map_err(|error| Rejection {
            status: StatusCode::BAD_REQUEST,
            message: format!("cannot decode the conversion review: {error}"),
        })?;
        let request = ConversionRequest::from_review(review).map_err(|error| Rejection {
            status: StatusCode::BAD_REQUEST,
            message: error.to_string(),
        })?;
        let desired = request.desired_api_version.clone();
        let objects = request.objects.clone();
        let response = ConversionResponse::for_request(request);
        let outcome =
            std::panic::catch_unwind(AssertUnwindSafe(|| self.convert_all(objects, &desired)));
        let response = match outcome {
            Ok(Ok(converted)) => response.success(converted),
            Ok(Err(message)) => response.failure(Status::failure(&message, "ConversionFailed")),
            Err(panic) => {
                metrics::conversion_panic();
                let message = panic_message(panic.as_ref());
                tracing::error!(panic = %message, "conversion panicked");
                response.failure(
                    Status::failure(&format!("panic: {message} [recovered]"), "InternalError")
                        .with_code(500),
                )
            }
        };
        serde_json::to_vec(&response.into_review())
            .map(Bytes::from)
            .map_err(|error| Rejection {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: format!("cannot encode the conversion response: {error}"),
            })
    }

    fn convert_all(&self, objects: Vec<Value>, desired: &str) -> Result<Vec<Value>, String> {
        let (desired_group, desired_version) = split_api_version(desired);
        let kinds = self.kinds.read_unpoisoned().clone();
        objects
            .into_iter()
            .enumerate()
            .map(|(index, object)| {
                let name = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let describe = |message: String| format!("object {index} ({name:?}): {message}");
                let from = object
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .ok_or_else(|| describe("has no apiVersion".to_owned()))?
                    .to_owned();
                let kind = object
                    .get("kind")
                    .and_then(Value::as_str)
                    .ok_or_else(|| describe("has no kind".to_owned()))?
                    .to_owned();
                let (group, version) = split_api_version(&from);
                if group != desired_group {
                    return Err(describe(format!(
                        "cannot convert from group {group:?} to {desired_group:?}"
                    )));
                }
                if version == desired_version {
                    return Ok(object);
                }
                let conversion = kinds
                    .get(&(group.to_owned(), kind.clone()))
                    .ok_or_else(|| {
                        describe(format!("no conversion registered for {from}/{kind}"))
                    })?;
                conversion
                    .convert(object, version, desired_version)
                    .map_err(|error| describe(error.to_string()))
            })
            .collect()
    }
}
