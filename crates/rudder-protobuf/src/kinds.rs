//! The table [`decoder`](crate::decoder) looks kinds up in, which the generated code fills.

use std::any::{Any, TypeId};
use std::collections::HashMap;

use crate::{DecodeError, Message, decode};

/// A decoder of `K`'s message (what [`decoder`](crate::decoder) gives).
pub type Decoder<K> = fn(&[u8]) -> Result<K, DecodeError>;

/// The decoders of every kind, by `TypeId`, each a `fn(&[u8]) -> Result<K, DecodeError>`.
pub(crate) struct Registry(pub(crate) HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl Registry {
    pub(crate) fn add<K: Message + 'static>(&mut self) {
        let decode: Decoder<K> = decode::<K>;
        self.0.insert(TypeId::of::<K>(), Box::new(decode));
    }
}
