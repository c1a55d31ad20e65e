//! [`Client`]: the reconciler's client, controller-runtime's `client.Client`: reads from the
//! shared cache, writes to the API server with the object's own `Api`.

use std::fmt::Debug;
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use rudder_cache::{ApiScope, Cache, ListOptions, Typed};
use rudder_core::Request;
use serde::Serialize;

use crate::reads::DeclaredReads;
use crate::{ClientError, Operation};
use rudder_cache::writes::Written;
use rudder_core::writes::{ObjectRef, WriteScope};

/// The identity writes and the cache's tracker name `namespace/name` of `K` by.
pub(crate) fn object_ref<K: Typed>(namespace: Option<&str>, name: &str) -> ObjectRef {
    ObjectRef::new(K::group(&()), K::plural(&()), namespace, name)
}

/// The reconciler's client: reads come from the manager's shared cache (no request to the
/// API server), writes go to the API server through the `Api` the object itself implies
/// (its type, and the namespace in its metadata), so a reconciler never builds an `Api` by
/// hand.
///
/// Writes that replace or patch what was read carry its resourceVersion: if the object
/// changed on the server since (or the cache was behind), the write fails with a conflict
/// ([`ClientError::is_conflict`]) instead of overwriting someone else's change, and the
/// reconcile is retried on a fresher read. Cloning is cheap.
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use rudder_client::Client;
/// use rudder_core::Request;
///
/// # async fn demo(client: Client, request: Request) -> Result<(), rudder_client::ClientError> {
/// if let Some(cm) = client.get::<ConfigMap>(&request).await? {
///     let mut cm = (*cm).clone();
///     cm.data.get_or_insert_default().insert("seen".into(), "yes".into());
///     // Conditional on the resourceVersion read: a conflict if it changed meanwhile.
///     client.update(&cm).await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    kube: kube::Client,
    cache: Cache,
    field_manager: Arc<str>,
    /// What reads must be declared against (a controller's client, from its manager).
    declared: Option<DeclaredReads>,
}

impl Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("field_manager", &self.field_manager)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client reading from `cache` and writing through `kube`; server-side applies name
    /// `field_manager` as the owner of the fields they set.
    pub fn new(kube: kube::Client, cache: Cache, field_manager: impl Into<Arc<str>>) -> Self {
        Self {
            kube,
            cache,
            field_manager: field_manager.into(),
            declared: None,
        }
    }

    /// This client, refusing reads from the cache that `declared` does not cover
    /// ([`ClientError::Undeclared`]) before they start an informer: what a controller's
    /// client does with its manager's (rudder-manager's `Manager::declared_reads`).
    #[must_use]
    pub fn with_declared_reads(mut self, declared: DeclaredReads) -> Self {
        self.declared = Some(declared);
        self
    }

    /// Refuses a read of `K` in `namespace` that no declaration covers.
    fn check_declared<K: Typed>(&self, namespace: Option<&str>) -> Result<(), ClientError> {
        if let Some(declared) = &self.declared {
            declared.check::<K>(namespace)?;
        }
        Ok(())
    }

    /// The underlying kube client, for what this one does not cover (subresources such as
    /// logs or exec, reads that must not come from the cache).
    pub fn kube(&self) -> &kube::Client {
        &self.kube
    }

    /// The shared cache the reads come from.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The field manager of server-side applies.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// An `Api<K>` over `namespace` (`None`: all namespaces, or a cluster-scoped type).
    pub fn api<K: Typed>(&self, namespace: Option<&str>) -> Api<K> {
        <K::Scope as ApiScope>::api::<K>(self.kube.clone(), namespace)
    }

    /// The `Api<K>` that `object` lives in: its type, and the namespace in its metadata.
    pub fn api_for<K: Typed>(&self, object: &K) -> Api<K> {
        self.api::<K>(object.meta().namespace.as_deref())
    }

    /// The object `request` names, from the cache (`None` if it does not exist, as far as
    /// the cache has seen). The first read of a type starts its informer and waits for it
    /// to sync.
    ///
    /// # Errors
    ///
    /// [`ClientError::Cache`]: the informer could not be made or did not sync, the API
    /// server refused its list or watch ([`SyncError::Refused`](rudder_cache::SyncError::Refused),
    /// at once), or the namespace is not cached. For a controller's client,
    /// [`ClientError::Undeclared`] when no declaration covers reading `K` (declare it with
    /// the controller builder's `reads::<K>()`).
    pub async fn get<K: Typed>(&self, request: &Request) -> Result<Option<Arc<K>>, ClientError> {
        self.check_declared::<K>(request.namespace())?;
        if let Some(scope) = WriteScope::current() {
            let object = object_ref::<K>(request.namespace(), request.name());
            if !self.cache.writes().wait_for_object(&object, &scope).await {
                tracing::debug!(%object, "reading a cache that has not delivered this reconcile's last write of the object");
            }
        }
        Ok(self
            .cache
            .get::<K>(request.namespace(), request.name())
            .await?)
    }

    /// The objects of type `K` that `options` select, from the cache.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    pub async fn list<K: Typed>(&self, options: &ListOptions) -> Result<Vec<Arc<K>>, ClientError> {
        self.check_declared::<K>(options.namespace.as_deref())?;
        if let Some(scope) = WriteScope::current() {
            let writes = self.cache.writes();
            let (group, resource) = (K::group(&()), K::plural(&()));
            let namespace = options.namespace.as_deref();
            if !writes
                .wait_for_resource(&group, &resource, namespace, &scope)
                .await
            {
                tracing::debug!(%resource, ?namespace, "listing from a cache that has not delivered every write this reconcile made there");
            }
        }
        Ok(self.cache.list::<K>(options).await?)
    }

    /// Creates `object` in its namespace; returns it as the server stored it.
    ///
    /// # Errors
    ///
    /// The API server's; one that already exists is a conflict
    /// ([`ClientError::is_conflict`], reason `AlreadyExists`).
    pub async fn create<K: Typed + Serialize>(&self, object: &K) -> Result<K, ClientError> {
        let created = self
            .api_for(object)
            .create(&PostParams::default(), object)
            .await?;
        Ok(self.remember(created))
    }

    /// Replaces `object` (not its status), conditional on the resourceVersion it carries.
    ///
    /// # Errors
    ///
    /// A conflict if the object changed since it was read; the API server's otherwise.
    pub async fn update<K: Typed + Serialize>(&self, object: &K) -> Result<K, ClientError> {
        let updated = self
            .api_for(object)
            .replace(&object.name_any(), &PostParams::default(), object)
            .await?;
        Ok(self.remember(updated))
    }

    /// Replaces `object`'s status (the status subresource) with the status it carries,
    /// conditional on the resourceVersion it carries: controller-runtime's
    /// `Status().Update`, and the way to write a status computed from a read.
    ///
    /// The status is written as it is: a field it leaves out (`None`, or an empty list that
    /// its type skips when serializing) is cleared on the server, which a merge patch
    /// ([`patch_status`](Self::patch_status)) would leave as it was. The rest of `object`
    /// (spec, labels) is not written.
    ///
    /// # Errors
    ///
    /// As [`update`](Self::update): a conflict if the object changed since it was read
    /// (read it again and recompute the status).
    pub async fn update_status<K: Typed + Serialize>(&self, object: &K) -> Result<K, ClientError> {
        let updated = self
            .api_for(object)
            .replace_status(&object.name_any(), &PostParams::default(), object)
            .await?;
        Ok(self.remember(updated))
    }

    /// Patches `object` (named by its name and namespace) with `patch`. A merge patch
    /// carrying `metadata.resourceVersion` is conditional on it; see
    /// [`patch_status`](Self::patch_status) for the common status case.
    ///
    /// # Errors
    ///
    /// The API server's.
    pub async fn patch<K, P>(&self, object: &K, patch: &Patch<P>) -> Result<K, ClientError>
    where
        K: Typed,
        P: Serialize + Debug,
    {
        let patched = self
            .api_for(object)
            .patch(&object.name_any(), &PatchParams::default(), patch)
            .await?;
        Ok(self.remember(patched))
    }

    /// Merges `status` into `object`'s status (a JSON merge patch of the status
    /// subresource), conditional on the resourceVersion `object` carries, so a status
    /// computed from a stale read is refused rather than written over a newer one. Returns
    /// the object as written.
    ///
    /// # A merge patch never clears a field it leaves out
    ///
    /// Only the fields `status` serializes are written. A field it skips when empty
    /// (`#[serde(skip_serializing_if = "Option::is_none")]` on a `None`, or
    /// `skip_serializing_if = "Vec::is_empty"` on an empty list, as most status types and
    /// kube's derive have it) is not in the patch, so **the server keeps its old value**:
    /// clearing an error message, or removing the last condition, this way silently does
    /// nothing, on every reconcile. A list that is in the patch replaces the stored list
    /// whole, entries other writers set included.
    ///
    /// To write a status as computed, use [`update_status`](Self::update_status) (a
    /// replace, conditional the same way), or [`apply_status`](Self::apply_status)
    /// (server-side apply, which removes what this field manager applied before and no
    /// longer applies). `patch_status` is for setting fields, or for clearing one that
    /// `status` serializes as `null`.
    ///
    /// # Errors
    ///
    /// A conflict if the object changed since it was read; the API server's otherwise.
    pub async fn patch_status<K, S>(&self, object: &K, status: &S) -> Result<K, ClientError>
    where
        K: Typed,
        S: Serialize,
    {
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": object.meta().resource_version },
            "status": status,
        });
        let patched = self
            .api_for(object)
            .patch_status(
                &object.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(self.remember(patched))
    }

    /// Server-side applies `object` as this client's field manager, forcing conflicts with
    /// other managers (what a controller owning its objects wants). `object` should hold
    /// only the fields this controller manages, with `apiVersion` and `kind` set.
    ///
    /// # Errors
    ///
    /// The API server's.
    pub async fn apply<K: Typed + Serialize>(&self, object: &K) -> Result<K, ClientError> {
        let params = PatchParams::apply(&self.field_manager).force();
        let applied = self
            .api_for(object)
            .patch(&object.name_any(), &params, &Patch::Apply(object))
            .await?;
        Ok(self.remember(applied))
    }

    /// Server-side applies `object`'s status (the status subresource), as
    /// [`apply`](Self::apply): `object` names the object and holds the status fields this
    /// controller owns (build it anew rather than sending back a read: a read carries
    /// `managedFields` and a resourceVersion). A field this field manager applied before and
    /// leaves out now is removed; fields other managers own are left alone. Not conditional
    /// on a resourceVersion.
    ///
    /// # Errors
    ///
    /// The API server's.
    pub async fn apply_status<K: Typed + Serialize>(&self, object: &K) -> Result<K, ClientError> {
        let params = PatchParams::apply(&self.field_manager).force();
        let applied = self
            .api_for(object)
            .patch_status(&object.name_any(), &params, &Patch::Apply(object))
            .await?;
        Ok(self.remember(applied))
    }

    /// Deletes `object` if it is still the object that was read: the delete is conditional
    /// on its uid, so a newer object of the same name is left alone. Returns whether this
    /// call deleted it (or started deleting it); `false` when it was already gone or the
    /// name now belongs to another object, which is what a reconcile wants in both cases.
    ///
    /// # Errors
    ///
    /// The API server's, other than Not Found and a failed uid precondition.
    pub async fn delete<K: Typed>(&self, object: &K) -> Result<bool, ClientError> {
        let params = DeleteParams {
            preconditions: object.uid().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let deleted = Written::Deleted { uid: object.uid() };
        match self
            .api_for(object)
            .delete(&object.name_any(), &params)
            .await
        {
            // The object as deleted (still there while finalizers hold it: the version
            // written is the one with the deletion timestamp), or a status: gone.
            Ok(answer) => {
                match answer.left() {
                    // Its deletion started (and may have finished already: a cache that
                    // no longer holds it has reached this write too).
                    Some(deleting) => {
                        let resource_version = deleting.meta().resource_version.clone();
                        let written = match resource_version {
                            Some(resource_version) => Written::Deleting {
                                resource_version,
                                uid: deleting.uid(),
                            },
                            None => deleted,
                        };
                        self.remember_written(&deleting, written);
                    }
                    None => self.remember_written::<K>(object, deleted),
                }
                Ok(true)
            }
            // Gone already, or the name is another object's: the cache holding the one read
            // is behind, and a reconcile should not see it again.
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => {
                self.remember_written::<K>(object, deleted);
                Ok(false)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// [`create_or_update`](crate::create_or_update) of `namespace/name` through this client:
    /// the write it makes, if any, is remembered for read-your-writes.
    ///
    /// # Errors
    ///
    /// As [`create_or_update`](crate::create_or_update).
    pub async fn create_or_update<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        mutate: impl FnOnce(&mut K) -> Result<(), ClientError>,
    ) -> Result<(K, Operation), ClientError>
    where
        K: Typed + Default + Serialize,
    {
        let (object, operation) =
            crate::create_or_update(&self.api::<K>(namespace), name, mutate).await?;
        Ok((self.remember_if(object, operation), operation))
    }

    /// [`create_or_patch`](crate::create_or_patch) of `namespace/name` through this client;
    /// the write it makes, if any, is remembered for read-your-writes.
    ///
    /// # Errors
    ///
    /// As [`create_or_patch`](crate::create_or_patch).
    pub async fn create_or_patch<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        mutate: impl FnOnce(&mut K) -> Result<(), ClientError>,
    ) -> Result<(K, Operation), ClientError>
    where
        K: Typed + Default + Serialize,
    {
        let (object, operation) =
            crate::create_or_patch(&self.api::<K>(namespace), name, mutate).await?;
        Ok((self.remember_if(object, operation), operation))
    }

    /// [`add_finalizer`](crate::add_finalizer) through this client; the patch, if one is
    /// needed, is remembered for read-your-writes.
    ///
    /// # Errors
    ///
    /// As [`add_finalizer`](crate::add_finalizer).
    pub async fn add_finalizer<K: Typed>(&self, object: &K, name: &str) -> Result<K, ClientError> {
        if crate::has_finalizer(object, name) {
            return Ok(object.clone());
        }
        let written = crate::add_finalizer(&self.api_for(object), object, name).await?;
        Ok(self.remember(written))
    }

    /// [`remove_finalizer`](crate::remove_finalizer) through this client; the patch, if one
    /// is needed, is remembered for read-your-writes (and so is the object's deletion, when
    /// it was gone: the patch found nothing).
    ///
    /// # Errors
    ///
    /// As [`remove_finalizer`](crate::remove_finalizer).
    pub async fn remove_finalizer<K: Typed>(
        &self,
        object: &K,
        name: &str,
    ) -> Result<Option<K>, ClientError> {
        if !crate::has_finalizer(object, name) {
            return Ok(Some(object.clone()));
        }
        match crate::remove_finalizer(&self.api_for(object), object, name).await? {
            Some(written) => Ok(Some(self.remember(written))),
            None => {
                self.remember_written(object, Written::Deleted { uid: object.uid() });
                Ok(None)
            }
        }
    }

    fn remember_if<K: Typed>(&self, object: K, operation: Operation) -> K {
        match operation {
            Operation::Unchanged => object,
            Operation::Created | Operation::Updated => self.remember(object),
        }
    }

    /// Records `written`, the version a write inside a reconcile returned, with the cache's
    /// write tracker (read-your-writes), and hands it back.
    fn remember<K: Typed>(&self, written: K) -> K {
        if let Some(version) = Written::of_meta(written.meta()) {
            self.remember_written(&written, version);
        }
        written
    }

    /// Records that `object` was written as `written`, if inside a reconcile whose controller
    /// reads its own writes: the controller holds the key until the cache has it, and reads
    /// of it wait for it.
    fn remember_written<K: Typed>(&self, object: &K, written: Written) {
        let Some(scope) = WriteScope::current() else {
            return;
        };
        let meta = object.meta();
        let namespace = meta.namespace.as_deref();
        let name = meta.name.as_deref().unwrap_or_default();
        self.cache
            .writes()
            .record(object_ref::<K>(namespace, name), written, &scope, || {
                self.cache.cached::<K>(namespace, name)
            });
    }
}
