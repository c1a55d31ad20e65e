//! Transforms applied to objects before they are stored, and the ready-made one.

use std::sync::Arc;

use kube::Resource;

/// A function applied to every object before it is stored (and before handlers see it).
pub type Transform<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// Drops `metadata.managedFields`, the server-side-apply bookkeeping that controllers rarely
/// read and that is often the largest part of an object's metadata. The default transform of
/// every informer; turn it off with `InformerBuilder::transform_opt(None)` or
/// `ByObject::keep_managed_fields`.
pub fn strip_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// An informer's transform, as its watch task runs it: the function, if any, and whether it
/// may add to an object (grow a `Vec`, a `String` or a map), which decides whether a decoded
/// object can be stored as it is (see the watch task's `exact`).
pub(crate) struct Transforming<K> {
    pub(crate) transform: Option<Transform<K>>,
    /// `false` only for no transform and for [`strip_managed_fields`], which takes a field
    /// away whole; a caller's own function is taken to add.
    pub(crate) may_add: bool,
}

impl<K> From<Option<Transform<K>>> for Transforming<K> {
    /// A caller's transform (which may add to objects), or none.
    fn from(transform: Option<Transform<K>>) -> Self {
        Self {
            may_add: transform.is_some(),
            transform,
        }
    }
}
