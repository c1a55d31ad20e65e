//! Decoders by type: [`decoder`] finds the one of a k8s-openapi kind.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::OnceLock;

use crate::{DecodeError, Message, decode};

/// The decoders of every kind, by `TypeId`, each a `fn(&[u8]) -> Result<K, DecodeError>`.
pub(crate) struct Registry(HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl Registry {
    pub(crate) fn add<K: Message + 'static>(&mut self) {
        let decode: Decoder<K> = decode::<K>;
        self.0.insert(TypeId::of::<K>(), Box::new(decode));
    }
}

/// A decoder of `K`'s message (what [`decoder`] gives).
pub type Decoder<K> = fn(&[u8]) -> Result<K, DecodeError>;

/// The protobuf decoder of `K` when `K` is one of k8s-openapi's kinds (a top-level resource
/// type, `Status` too); `None` for every other type: custom resources, `DynamicObject`,
/// `PartialObjectMeta`, which a client reads as JSON.
///
/// The decoder reads an object's message: an [`Unknown`](crate::Unknown)'s `raw`, or a
/// whole body with its `k8s\0` magic and envelope (see [`decode`]).
pub fn decoder<K: 'static>() -> Option<Decoder<K>> {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            let mut registry = Registry(HashMap::new());
            crate::generated::register(&mut registry);
            registry
        })
        .0
        .get(&TypeId::of::<K>())
        .and_then(|decode| decode.downcast_ref::<Decoder<K>>())
        .copied()
}
