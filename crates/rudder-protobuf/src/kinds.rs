//! The table [`decoder`](crate::decoder) looks kinds up in, which the generated code fills.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use crate::{DecodeError, Message, message_of};

/// A decoder of `K`'s message (what [`decoder`](crate::decoder) gives): the object is
/// decoded in place behind the `Arc` it is returned in, the form a cache keeps objects in
/// (a kind is hundreds of bytes to several kilobytes, which a value returned through a few
/// calls would be copied along with; `Arc::unwrap_or_clone` takes it out without a clone).
pub type Decoder<K> = fn(&[u8]) -> Result<Arc<K>, DecodeError>;

/// The decoders of every kind, by `TypeId`, each a [`Decoder`].
pub(crate) struct Registry(pub(crate) HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl Registry {
    pub(crate) fn add<K: Message + Clone + 'static>(&mut self) {
        let decode: Decoder<K> = decode_in_arc::<K>;
        self.0.insert(TypeId::of::<K>(), Box::new(decode));
    }
}

/// [`decode`](crate::decode), in place behind an `Arc`.
fn decode_in_arc<K: Message + Clone>(bytes: &[u8]) -> Result<Arc<K>, DecodeError> {
    let mut out = Arc::new(K::default());
    // The only handle: `make_mut` never clones here.
    Arc::make_mut(&mut out).merge(message_of(bytes)?)?;
    Ok(out)
}
