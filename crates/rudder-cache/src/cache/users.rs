//! [`InformerUse`]: a user's hold on one of the cache's informers, which stops when its last
//! user lets go.

use std::fmt::{self, Debug};
use std::ops::Deref;
use std::sync::{Arc, Weak};

use super::registry::{InformerKey, Inner};
use crate::informer::Informer;

/// A hold on one of the cache's informers: while any use of it exists, the informer runs;
/// when the last one is dropped, the informer stops and the cache forgets it (its store's
/// memory is freed once the last [`Informer`] handle and subscription are gone too), unless
/// something asked for it without a use.
///
/// What holds an informer, and what does not:
///
/// - a controller's source on the cache (`rudder_handler::Kind`) holds a use for each of its
///   informers while it runs, so removing the controller stops the informers only it used;
/// - [`Cache::acquire`](super::Cache::acquire) and
///   [`Cache::acquire_dynamic`](super::Cache::acquire_dynamic) give one to anyone else;
/// - [`Cache::informer`](super::Cache::informer) (and
///   [`Cache::dynamic_informer`](super::Cache::dynamic_informer)) and a cached read ([`Cache::get`](super::Cache::get),
///   [`Cache::list`](super::Cache::list)) that finds no informer running *pin* the one they
///   start: it runs until the cache stops or
///   [`Cache::remove_informer`](super::Cache::remove_informer), as in controller-runtime. A
///   read of an informer someone holds does not pin it.
///
/// Cloning a use gives another handle to the same hold (it ends when every clone is gone);
/// acquire again for a hold of your own. It dereferences to the [`Informer`] it was acquired
/// with; if that informer fails and the cache replaces it, acquire again to reach the new one
/// (the hold is on the type and scope, so it covers the replacement too).
pub struct InformerUse<K> {
    informer: Informer<K>,
    _hold: Arc<Hold>,
}

impl<K> Clone for InformerUse<K> {
    fn clone(&self) -> Self {
        Self {
            informer: self.informer.clone(),
            _hold: Arc::clone(&self._hold),
        }
    }
}

impl<K> Debug for InformerUse<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerUse")
            .field("scope", &self._hold.key.scope)
            .finish_non_exhaustive()
    }
}

impl<K> Deref for InformerUse<K> {
    type Target = Informer<K>;

    fn deref(&self) -> &Informer<K> {
        &self.informer
    }
}

impl<K> InformerUse<K> {
    /// The informer this use was acquired with.
    pub fn informer(&self) -> &Informer<K> {
        &self.informer
    }

    pub(crate) fn new(informer: Informer<K>, hold: Hold) -> Self {
        Self {
            informer,
            _hold: Arc::new(hold),
        }
    }
}

/// One count on a (type, scope), given back when dropped.
pub(crate) struct Hold {
    inner: Weak<Inner>,
    key: InformerKey,
}

impl Hold {
    /// Counts one more user of `key` in `inner`.
    pub(crate) fn new(inner: &Arc<Inner>, key: InformerKey) -> Self {
        inner.hold(&key);
        Self {
            inner: Arc::downgrade(inner),
            key,
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.release(&self.key);
        }
    }
}
