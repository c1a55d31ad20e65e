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
