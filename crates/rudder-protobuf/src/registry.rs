//! Decoders by type: [`decoder`] finds the one of a k8s-openapi kind.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::OnceLock;

use crate::kinds::Registry;

/// The protobuf decoder of `K` when `K` is one of k8s-openapi's kinds (a top-level resource
/// type, `Status` too); `None` for every other type: custom resources, `DynamicObject`,
/// `PartialObjectMeta`, which a client reads as JSON.
///
/// The decoder reads an object's message: an [`Unknown`](crate::Unknown)'s `raw`, or a
/// whole body with its `k8s\0` magic and envelope (see [`decode`](crate::decode)).
pub fn decoder<K: 'static>() -> Option<crate::Decoder<K>> {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            let mut registry = Registry(HashMap::new());
            crate::generated::register(&mut registry);
            registry
        })
        .0
        .get(&TypeId::of::<K>())
        .and_then(|decode| decode.downcast_ref::<crate::Decoder<K>>())
        .copied()
}
