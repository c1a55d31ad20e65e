//! Helpers on an `Api`: owner references, create-or-update, create-or-patch, finalizers,
//! server-side apply, and installing a CRD; and the errors of the client and the helpers.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Re-exported: kube-runtime's finalizer flow (`finalizer(api, name, obj, |event| ..)`), on
/// which [`add_finalizer`] and [`remove_finalizer`] are the manual steps.
pub use kube_runtime::finalizer::{Event as FinalizerEvent, finalizer};

/// Errors of the client helpers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The object already has a different controller owner; an object has at most one.
    #[error("{object} is already controlled by {kind} {name}")]
    AlreadyOwned {
        /// The object.
        object: String,
        /// The existing controller's kind.
        kind: String,
        /// The existing controller's name.
        name: String,
    },
    /// The owner has no name or uid yet (it was not read back from the server).
    #[error("the owner has no {0} yet: read it from the server first")]
    OwnerIncomplete(&'static str),
    /// The API server refused or failed a request.
    #[error("API request failed")]
    Api(#[from] kube::Error),
    /// A read from the shared cache failed (the informer could not be made or did not
    /// sync, or the namespace is not cached).
    #[error("cannot read from the cache")]
    Cache(#[from] rudder_cache::Error),
    /// A read from the cache of a type no declaration covers, refused before it started an
    /// informer: the operator's rendered RBAC would not let that informer list and watch it
    /// (the message names the declaration to add, `.reads::<K>()` on the controller). Only
    /// a controller's client checks ([`Client::with_declared_reads`](crate::Client::with_declared_reads):
    /// the facade's `Tools::client`, unless the manager was built with
    /// `require_declared_reads(false)`); retrying does not help until the type is declared.
    #[error(transparent)]
    Undeclared(#[from] crate::reads::Undeclared),
    /// The object could not be turned into JSON (to compare or patch it).
    #[error("cannot serialize the object")]
    Json(#[from] serde_json::Error),
    /// The mutation given to [`create_or_update`] or [`create_or_patch`] failed; nothing was
    /// written.
    #[error("the mutation failed")]
    Mutate(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The mutation changed the object's name or namespace, which picks another object.
    #[error("the mutation changed the object's name or namespace")]
    Renamed,
    /// A CustomResourceDefinition was applied but not served in time.
    #[error("CustomResourceDefinition {name} was not established and served within {timeout:?}")]
    CrdNotServed {
        /// The CRD's name.
        name: String,
        /// How long it was given.
        timeout: std::time::Duration,
    },
}

impl ClientError {
    /// Wraps an error of a mutation (see [`create_or_update`]).
    pub fn mutate(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Mutate(error.into())
    }

    /// The API server's status code, if it answered with an error.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Self::Api(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }

    /// Whether the API server answered 404 Not Found.
    pub fn is_not_found(&self) -> bool {
        self.status_code() == Some(404)
    }

    /// Whether the API server answered 409 Conflict: a stale resourceVersion, or an object
    /// that already exists.
    pub fn is_conflict(&self) -> bool {
        self.status_code() == Some(409)
    }
}

/// What [`create_or_update`] or [`create_or_patch`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// The object did not exist and was created.
    Created,
    /// The object existed and was changed: the server stored a new version.
    Updated,
    /// The object existed and the mutation changed nothing: nothing was written, or the
    /// write changed nothing once the server had applied its defaults (its resourceVersion
    /// is the one read).
    Unchanged,
}

fn reference<O: Resource<DynamicType = ()>>(
    owner: &O,
    controller: bool,
) -> Result<OwnerReference, ClientError> {
    let meta = owner.meta();
    Ok(OwnerReference {
        api_version: O::api_version(&()).into_owned(),
        kind: O::kind(&()).into_owned(),
        name: meta
            .name
            .clone()
            .ok_or(ClientError::OwnerIncomplete("name"))?,
        uid: meta
            .uid
            .clone()
            .ok_or(ClientError::OwnerIncomplete("uid"))?,
        controller: controller.then_some(true),
        block_owner_deletion: controller.then_some(true),
    })
}

/// Makes `owner` the controller of `object` (`controller: true`, `blockOwnerDeletion:
/// true`), replacing an existing reference to the same owner. Fails if another object is
/// already its controller.
pub fn set_controller_reference<O, K>(owner: &O, object: &mut K) -> Result<(), ClientError>
where
    O: Resource<DynamicType = ()>,
    K: Resource,
{
    let new = reference(owner, true)?;
    let other = object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.uid != new.uid)
        .map(|r| (r.kind.clone(), r.name.clone()));
    if let Some((kind, name)) = other {
        return Err(ClientError::AlreadyOwned {
            object: object.name_any(),
            kind,
            name,
        });
    }
    upsert(object, new);
    Ok(())
}

/// Whether `owner` is `object`'s controller: a controller owner reference with `owner`'s
/// uid (controller-runtime's `IsControlledBy`). An owner without a uid controls nothing.
pub fn is_controlled_by<O: Resource, K: Resource>(owner: &O, object: &K) -> bool {
    let Some(uid) = owner.meta().uid.as_deref() else {
        return false;
    };
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

/// Puts `new` among `object`'s owner references, replacing one with the same uid.
fn upsert<K: Resource>(object: &mut K, new: OwnerReference) {
    let refs = object
        .meta_mut()
        .owner_references
        .get_or_insert_with(Vec::new);
    refs.retain(|r| r.uid != new.uid);
    refs.push(new);
}

/// Adds `owner` as a (non-controller) owner of `object`, replacing an existing reference to
/// it: garbage collection deletes `object` once every owner is gone.
pub fn set_owner_reference<O, K>(owner: &O, object: &mut K) -> Result<(), ClientError>
where
    O: Resource<DynamicType = ()>,
    K: Resource,
{
    upsert(object, reference(owner, false)?);
    Ok(())
}

/// Applies `mutate` and checks it kept the object's identity.
fn mutated<K: Resource>(
    object: &mut K,
    mutate: impl FnOnce(&mut K) -> Result<(), ClientError>,
) -> Result<(), ClientError> {
    let (name, namespace) = (object.meta().name.clone(), object.meta().namespace.clone());
    mutate(object)?;
    if object.meta().name != name || object.meta().namespace != namespace {
        return Err(ClientError::Renamed);
    }
    Ok(())
}

/// Gets `name` (or starts from a default object with that name), applies `mutate`, and
/// creates or replaces it if that changed anything. The replace carries the read
/// resourceVersion, so a concurrent change makes it fail with a conflict (retry the
/// reconcile).
///
/// `mutate` sets the fields this writer owns, the same way whether the object is new or
/// not; it may fail (return [`ClientError::mutate`] of your error, or a helper's error such
/// as [`set_controller_reference`]'s), and then nothing is written. Changing the name or
/// namespace is [`ClientError::Renamed`].
///
/// # When it writes, and what it reports
///
/// The mutated object is compared with the one read, as JSON. Equal: no request,
/// [`Operation::Unchanged`]. Different: the replace is sent, and the API server applies its
/// defaults to it and stores nothing if the result is the object it has. That is the case
/// when the mutation only leaves out fields the server defaults (it rebuilds a
/// Deployment's `spec` without `strategy`, or a container without
/// `terminationMessagePath`): the resourceVersion stays, no watch event is sent, and the
/// result is [`Operation::Unchanged`] too, told by the resourceVersion of the answer.
/// [`Operation::Updated`] means the server stored a new version.
///
/// Such a mutation still costs a request on every call. To save it, set the fields this
/// writer owns on the object read (`spec.replicas = ..`) instead of replacing the structs
/// that hold defaulted fields.
pub async fn create_or_update<K>(
    api: &Api<K>,
    name: &str,
    mutate: impl FnOnce(&mut K) -> Result<(), ClientError>,
) -> Result<(K, Operation), ClientError>
where
    K: Resource + Clone + Default + Serialize + DeserializeOwned + Debug,
{
    // Only what the write needs is held across its await (a Deployment is kilobytes, and a
    // reconciler's future carries this one).
    let Some(current) = api.get_opt(name).await? else {
        return create(api, name, mutate).await;
    };
    let (object, read) = match mutate_read(current, mutate)? {
        Mutation::Unchanged(current) => return Ok((current, Operation::Unchanged)),
        Mutation::Changed { object, read, .. } => (object, read),
    };
    let updated = api.replace(name, &PostParams::default(), &object).await?;
    let operation = written(read, &updated);
    Ok((updated, operation))
}

/// Like [`create_or_update`], but writes an existing object with a JSON merge patch of only
/// what `mutate` changed, so fields other writers own are left alone. The patch is not
/// conditional on the resourceVersion read.
///
/// It writes and reports as [`create_or_update`] does: no request when the mutation
/// changed nothing as JSON; otherwise the patch, which the API server stores only if it
/// changes the object after the server's defaulting. A mutation that only leaves out
/// defaulted fields (a Deployment's `spec.strategy`, a container's
/// `terminationMessagePath`) sends a patch that changes nothing: the resourceVersion stays
/// and the result is [`Operation::Unchanged`].
pub async fn create_or_patch<K>(
    api: &Api<K>,
    name: &str,
    mutate: impl FnOnce(&mut K) -> Result<(), ClientError>,
) -> Result<(K, Operation), ClientError>
where
    K: Resource + Clone + Default + Serialize + DeserializeOwned + Debug,
{
    let Some(current) = api.get_opt(name).await? else {
        return create(api, name, mutate).await;
    };
    let (diff, read) = match mutate_read(current, mutate)? {
        Mutation::Unchanged(current) => return Ok((current, Operation::Unchanged)),
        Mutation::Changed { diff, read, .. } => (diff, read),
    };
    let patched = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&diff))
        .await?;
    let operation = written(read, &patched);
    Ok((patched, operation))
}

/// Creates `name` from a default object (in `api`'s namespace) that `mutate` fills.
async fn create<K>(
    api: &Api<K>,
    name: &str,
    mutate: impl FnOnce(&mut K) -> Result<(), ClientError>,
) -> Result<(K, Operation), ClientError>
where
    K: Resource + Clone + Default + Serialize + DeserializeOwned + Debug,
{
    let mut object = K::default();
    object.meta_mut().name = Some(name.to_owned());
    // As the server will have it, so a mutation that sets the namespace is no rename.
    object.meta_mut().namespace = api.namespace().map(str::to_owned);
    mutated(&mut object, mutate)?;
    let created = api.create(&PostParams::default(), &object).await?;
    Ok((created, Operation::Created))
}

/// What a mutation made of an object read.
enum Mutation<K> {
    /// Nothing, as JSON: the object as read.
    Unchanged(K),
    /// A changed copy, the merge patch from the object read to it, and the resourceVersion
    /// read.
    Changed {
        object: K,
        diff: Value,
        read: Option<String>,
    },
}

/// Applies `mutate` to a copy of `current` and compares the two as JSON (equal when their
/// merge patch is empty).
fn mutate_read<K>(
    current: K,
    mutate: impl FnOnce(&mut K) -> Result<(), ClientError>,
) -> Result<Mutation<K>, ClientError>
where
    K: Resource + Clone + Serialize,
{
    let mut object = current.clone();
    mutated(&mut object, mutate)?;
    let before = serde_json::to_value(&current)?;
    let after = serde_json::to_value(&object)?;
    let Some(diff) = merge_patch(&before, &after) else {
        return Ok(Mutation::Unchanged(current));
    };
    Ok(Mutation::Changed {
        read: current.meta().resource_version.clone(),
        object,
        diff,
    })
}

/// Whether a write of the version `read` that answered `answer` stored a new version: the
/// API server stores nothing, and keeps the resourceVersion, when a write changes nothing
/// after its defaulting. A write that raced another one, or an answer without a
/// resourceVersion, counts as an update.
fn written<K: Resource>(read: Option<String>, answer: &K) -> Operation {
    match (read, &answer.meta().resource_version) {
        (Some(read), Some(stored)) if read == *stored => Operation::Unchanged,
        _ => Operation::Updated,
    }
}

/// The JSON merge patch (RFC 7386) turning `before` into `after`, or `None` if they are
/// equal.
fn merge_patch(before: &Value, after: &Value) -> Option<Value> {
    if before == after {
        return None;
    }
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let mut patch = serde_json::Map::new();
            for (key, value) in a {
                match b.get(key) {
                    Some(old) => {
                        if let Some(p) = merge_patch(old, value) {
                            patch.insert(key.clone(), p);
                        }
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in b.keys().filter(|k| !a.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            Some(Value::Object(patch))
        }
        _ => Some(after.clone()),
    }
}

/// Whether `object` carries the finalizer `name`.
pub fn has_finalizer<K: Resource>(object: &K, name: &str) -> bool {
    object.finalizers().iter().any(|f| f == name)
}

/// Adds the finalizer `name` to the object (no write if it is there). The patch is
/// conditional on the object's resourceVersion, so it fails on a concurrent change.
pub async fn add_finalizer<K>(api: &Api<K>, object: &K, name: &str) -> Result<K, ClientError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut finalizers = object.finalizers().to_vec();
    if finalizers.iter().any(|f| f == name) {
        return Ok(object.clone());
    }
    finalizers.push(name.to_owned());
    write_finalizers(api, object, finalizers).await
}

/// Removes the finalizer `name` from the object (no write if it is absent), conditional on
/// its resourceVersion. Returns the object as written, or `None` if it is gone: removing
/// the last finalizer of an object being deleted lets it go, and a reconcile working from
/// a cache that has not seen that yet finds nothing to patch, which is success.
pub async fn remove_finalizer<K>(
    api: &Api<K>,
    object: &K,
    name: &str,
) -> Result<Option<K>, ClientError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let finalizers: Vec<String> = object
        .finalizers()
        .iter()
        .filter(|f| *f != name)
        .cloned()
        .collect();
    if finalizers.len() == object.finalizers().len() {
        return Ok(Some(object.clone()));
    }
    match write_finalizers(api, object, finalizers).await {
        Ok(object) => Ok(Some(object)),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(error),
    }
}

async fn write_finalizers<K>(
    api: &Api<K>,
    object: &K,
    finalizers: Vec<String>,
) -> Result<K, ClientError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": object.meta().resource_version,
            "finalizers": finalizers,
        }
    });
    Ok(api
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?)
}

/// Server-side applies a CustomResourceDefinition as `field_owner` (forcing conflicts), then
/// waits until it is established and discovery serves each of its served versions, so a
/// controller for its resources can be built right after (an operator installing its own
/// CRDs at start).
///
/// # Errors
///
/// [`ClientError::Api`] if the API server refuses the CRD (or the client lacks the right to
/// write CRDs); [`ClientError::CrdNotServed`] if it is not served within `timeout`.
pub async fn apply_crd(
    client: &kube::Client,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    field_owner: &str,
    timeout: std::time::Duration,
) -> Result<(), ClientError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let name = crd.name_any();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = crd.clone();
    // Fields the server owns would make the apply fail.
    crd.metadata.managed_fields = None;
    crd.metadata.resource_version = None;
    crd.status = None;
    crds.patch(
        &name,
        &PatchParams::apply(field_owner).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let established = crds.get_opt(&name).await?.is_some_and(|crd| {
            crd.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        if established && discovered(client, &crd).await {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(ClientError::CrdNotServed { name, timeout });
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Whether discovery lists `crd`'s resource in each of its served versions (which needs no
/// right beyond discovery's, unlike a list of the resources).
async fn discovered(
    client: &kube::Client,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> bool {
    for version in crd.spec.versions.iter().filter(|v| v.served) {
        let group_version = format!("{}/{}", crd.spec.group, version.name);
        let served = client
            .list_api_group_resources(&group_version)
            .await
            .is_ok_and(|list| {
                list.resources
                    .iter()
                    .any(|r| r.name == crd.spec.names.plural)
            });
        if !served {
            return false;
        }
    }
    true
}

/// Server-side applies `object` as `field_owner` (forcing conflicts, as a controller that
/// owns these fields should).
pub async fn apply<K>(api: &Api<K>, object: &K, field_owner: &str) -> Result<K, ClientError>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    let params = PatchParams::apply(field_owner).force();
    Ok(api
        .patch(&object.name_any(), &params, &Patch::Apply(object))
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_keeps_only_changes_and_nulls_removals() {
        let before = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
        let after = serde_json::json!({"a": 1, "b": {"c": 5}, "e": [1, 2], "f": true});
        assert_eq!(
            merge_patch(&before, &after),
            Some(serde_json::json!({"b": {"c": 5, "d": null}, "e": [1, 2], "f": true}))
        );
        assert_eq!(merge_patch(&before, &before), None);
    }
}
