//! The indexed object store behind every informer: `Arc<K>` by namespace/name, plus indexes.

use std::fmt;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use kube::Resource;
use rudder_core::sync::RwLockExt;

use crate::error::IndexError;
use crate::unwind;

/// The name of the built-in index from namespace to objects, usable with [`Store::by_index`].
///
/// Cluster-scoped objects are not in it.
pub const NAMESPACE_INDEX: &str = "namespace";

/// A function from an object to the values it is filed under in one index.
///
/// It must be deterministic: the store calls it again on the old object when that object is
/// replaced or deleted, to find the entries to remove.
///
/// A panic in it is caught: an object it panics on is not stored (an informer logs it at
/// `error`, counts it in [`InformerStats::panics`](crate::InformerStats::panics) and keeps the
/// object's last good version, if any), and [`Store::add_index`] fails with
/// [`IndexError::Panicked`]. Every value is computed before the store changes, so an object is
/// always either in the store and every index, or in none.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// Where an object lives: its namespace (none for cluster-scoped objects) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The namespace, or `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// The key of a namespaced object.
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// The key of a cluster-scoped object.
    pub fn cluster(name: impl Into<String>) -> Self {
        Self {
            namespace: None,
            name: name.into(),
        }
    }

    /// The key of an object, from its metadata.
    pub fn of<K: Resource>(obj: &K) -> Self {
        let meta = obj.meta();
        Self {
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A thread-safe map from [`ObjectKey`] to `Arc<K>`, with a namespace index and user indexes.
///
/// Cloning a `Store` gives another handle to the same objects. Every read takes a read lock
/// only for as long as it takes to clone the matching `Arc`s out; the informer takes the write
/// lock for one object at a time, so readers and the watch never wait on each other for long.
pub struct Store<K> {
    inner: Arc<RwLock<Inner<K>>>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.read();
        f.debug_struct("Store")
            .field("len", &inner.objects.len())
            .field("indexes", &inner.indexes.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<K: Resource> Default for Store<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> Store<K> {
    fn read(&self) -> RwLockReadGuard<'_, Inner<K>> {
        // Index functions, the only user code run under the lock, are called inside
        // `catch_unwind`, so the lock is never poisoned; were it to be, the maps are still
        // consistent (they change only after every index value has been computed).
        self.inner.read_unpoisoned()
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner<K>> {
        self.inner.write_unpoisoned()
    }
}

impl<K: Resource> Store<K> {
    /// An empty store with only the namespace index.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(RwLock::new(Inner {
                objects: HashTable::new(),
                namespaces: HashMap::new(),
                indexes: HashMap::new(),
                state: DefaultHashBuilder::default(),
                bytes: 0,
            })),
        }
    }

    /// The object with this key, if the store has it. O(1).
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        let inner = self.read();
        let ns = key.namespace.as_deref();
        let hash = inner.hash(ns, &key.name);
        inner
            .objects
            .find(hash, |e| is(&*e.obj, ns, &key.name))
            .map(|e| Arc::clone(&e.obj))
    }

    /// The number of objects.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.read().objects.is_empty()
    }

    /// Every object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read()
            .objects
            .iter()
            .map(|e| Arc::clone(&e.obj))
            .collect()
    }

    /// The keys of every object, in no particular order.
    pub fn keys(&self) -> Vec<ObjectKey> {
        self.read()
            .objects
            .iter()
            .map(|e| ObjectKey::of(&*e.obj))
            .collect()
    }

    /// The objects in one namespace, in O(objects in it).
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        let inner = self.read();
        inner
            .namespaces
            .get(namespace)
            .map_or_else(Vec::new, |set| set.iter().cloned().collect())
    }

    /// The objects filed under `value` in the index `index`, in O(matches).
    ///
    /// [`NAMESPACE_INDEX`] is always there; others are added with [`Store::add_index`].
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        if index == NAMESPACE_INDEX {
            return Ok(self.list_namespace(value));
        }
        let inner = self.read();
        let idx = inner
            .indexes
            .get(index)
            .ok_or_else(|| IndexError::Unknown {
                name: index.to_owned(),
            })?;
        Ok(idx
            .values
            .get(value)
            .map_or_else(Vec::new, |set| set.iter().cloned().collect()))
    }

    /// The values that index `index` currently has objects under, in no particular order.
    pub fn index_values(&self, index: &str) -> Result<Vec<String>, IndexError> {
        let inner = self.read();
        if index == NAMESPACE_INDEX {
            return Ok(inner.namespaces.keys().cloned().collect());
        }
        let idx = inner
            .indexes
            .get(index)
            .ok_or_else(|| IndexError::Unknown {
                name: index.to_owned(),
            })?;
        Ok(idx.values.keys().cloned().collect())
    }

    /// Adds an index, filing every object already in the store under it.
    ///
    /// From then on every add, update and delete keeps it exact: an update that changes an
    /// object's values removes it from the old ones.
    ///
    /// # Errors
    ///
    /// [`IndexError::Exists`] if the name is taken; [`IndexError::Panicked`] if `index`
    /// panics on an object already stored, in which case the index is not added.
    pub fn add_index<F>(&self, name: impl Into<String>, index: F) -> Result<(), IndexError>
    where
        F: Fn(&K) -> Vec<String> + Send + Sync + 'static,
    {
        let name = name.into();
        let mut inner = self.write();
        if name == NAMESPACE_INDEX || inner.indexes.contains_key(&name) {
            return Err(IndexError::Exists { name });
        }
        let mut idx = Index {
            func: Arc::new(index),
            values: HashMap::new(),
        };
        for entry in &inner.objects {
            // A panic leaves only the local `idx` half-filled, and it is dropped.
            let values = unwind::catch(|| (idx.func)(&entry.obj)).map_err(|message| {
                IndexError::Panicked {
                    name: name.clone(),
                    object: ObjectKey::of(&*entry.obj).to_string(),
                    message,
                }
            })?;
            for value in values {
                put(
                    &inner.state,
                    idx.values.entry(value).or_default(),
                    &entry.obj,
                );
            }
        }
        inner.indexes.insert(name, idx);
        Ok(())
    }

    /// Whether the store holds an object with `obj`'s key and `resourceVersion`.
    pub(crate) fn has_version_of(&self, obj: &K) -> bool {
        let inner = self.read();
        let (ns, name) = key_of(obj);
        let rv = obj.meta().resource_version.as_deref();
        rv.is_some()
            && inner
                .objects
                .find(inner.hash(ns, name), |e| is(&*e.obj, ns, name))
                .is_some_and(|e| e.obj.meta().resource_version.as_deref() == rv)
    }

    /// Stores `obj`, `size` bytes (see [`bytes`](Self::bytes)), stamped as seen in list
    /// `epoch`; says whether it was new, changed
    /// (a different `resourceVersion`) or unchanged. An unchanged object is dropped and the
    /// stored `Arc` kept, so a relist does not hold a second copy of what did not change.
    ///
    /// If an index function panics on `obj`, nothing changes but the stored version's epoch
    /// (so a relist keeps the last good version), the panic is pushed onto `panics` and the
    /// result is [`Applied::Skipped`]. Panics on the stored version (only possible with an
    /// index function that is not deterministic) are pushed too, and do not stop the update.
    pub(crate) fn apply(
        &self,
        obj: Arc<K>,
        size: usize,
        epoch: Epoch,
        panics: &mut Vec<IndexPanic>,
    ) -> Applied<K> {
        self.write().apply(obj, size, epoch, panics)
    }

    /// A relist's changed objects with their sizes, applied as [`apply`](Self::apply)
    /// applies each, then what the list did not stamp with `epoch` removed, as
    /// [`sweep`](Self::sweep) does: all under
    /// one write lock, so readers see the store as it was before the relist or as it is
    /// after, never a mix.
    pub(crate) fn replace(
        &self,
        changed: Vec<(Arc<K>, usize)>,
        epoch: Epoch,
        panics: &mut Vec<IndexPanic>,
    ) -> (Vec<Applied<K>>, Vec<Arc<K>>) {
        let mut inner = self.write();
        let applied = changed
            .into_iter()
            .map(|(obj, size)| inner.apply(obj, size, epoch, panics))
            .collect();
        let gone = inner.sweep(epoch, panics);
        (applied, gone)
    }

    /// Removes the object with this key, returning the last stored version. A panic in an
    /// index function on it (pushed onto `panics`) does not keep it in that index: the index
    /// is searched for it instead.
    pub(crate) fn remove(&self, key: &ObjectKey, panics: &mut Vec<IndexPanic>) -> Option<Arc<K>> {
        let mut guard = self.write();
        let inner = &mut *guard;
        let ns = key.namespace.as_deref();
        let hash = inner.hash(ns, &key.name);
        let stored = inner.objects.find(hash, |e| is(&*e.obj, ns, &key.name))?;
        let old_values = inner.old_values_of(&stored.obj, panics);
        let (entry, _) = inner
            .objects
            .find_entry(hash, |e| is(&*e.obj, ns, &key.name))
            .ok()?
            .remove();
        inner.reindex(Some((&entry.obj, old_values)), None);
        inner.bytes -= u64::from(entry.size);
        Some(entry.obj)
    }

    /// Stamps the object with this key, if stored, as seen in list `epoch`; whether it was.
    pub(crate) fn touch(&self, key: &ObjectKey, epoch: Epoch) -> bool {
        let mut guard = self.write();
        let inner = &mut *guard;
        let ns = key.namespace.as_deref();
        let hash = inner.hash(ns, &key.name);
        inner.touch(hash, ns, &key.name, epoch)
    }

    /// Removes every object not seen in list `epoch`, returning them; index panics on them
    /// are handled (and pushed onto `panics`) as in [`remove`](Self::remove).
    pub(crate) fn sweep(&self, epoch: Epoch, panics: &mut Vec<IndexPanic>) -> Vec<Arc<K>> {
        self.write().sweep(epoch, panics)
    }

    /// The sum of the stored objects' sizes, as given to [`apply`](Self::apply) (an informer
    /// gives each object's length as JSON: [`InformerStats::bytes_held`](crate::InformerStats::bytes_held)).
    /// Each object's size is kept beside it, so an update or a delete takes away what was
    /// added without measuring the old object again.
    pub(crate) fn bytes(&self) -> u64 {
        self.read().bytes
    }

    /// Runs `f` on every object under the read lock (used for resync and late handlers).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Arc<K>)) {
        let inner = self.read();
        for entry in &inner.objects {
            f(&entry.obj);
        }
    }
}

/// What [`Store::apply`] did.
pub(crate) enum Applied<K> {
    /// The key was new.
    Added(Arc<K>),
    /// The key was there with another resourceVersion.
    Updated { old: Arc<K>, new: Arc<K> },
    /// The key was there with the same resourceVersion.
    Unchanged,
    /// An index function panicked on the object, which was therefore not stored.
    Skipped,
}

/// A panic caught in an index function, for the informer to report.
#[derive(Debug)]
pub(crate) struct IndexPanic {
    /// The index whose function panicked.
    pub(crate) index: String,
    /// The object it panicked on.
    pub(crate) key: ObjectKey,
    /// The panic's message.
    pub(crate) message: String,
}

/// A stored object. The key is not stored beside it: the tables hash and compare the
/// object's own namespace and name, which saves two strings per object.
struct Entry<K> {
    obj: Arc<K>,
    /// The number of the last list (or watch session) the object was seen in.
    epoch: Epoch,
    /// The object's size as given to [`Store::apply`] (at most `u32::MAX`: an object in
    /// etcd is a few MiB at most), which fits beside the epoch in the entry's 16 bytes.
    size: u32,
}

const _: () = assert!(
    size_of::<Entry<()>>() == 16,
    "an entry is an `Arc`, an epoch and a size: 16 bytes"
);

/// The number of a list, which stamps the objects it brought; compared only for equality
/// (every list stamps or removes every stored object), so it may wrap.
pub(crate) type Epoch = u32;

/// A stored object's values in each user index (in the order of `Inner::indexes`), `None`
/// where the index function panicked on it.
type OldValues = Vec<Option<Vec<String>>>;

/// A set of objects by namespace/name, holding only the `Arc`s (8 bytes each).
type ObjectSet<K> = HashTable<Arc<K>>;

struct Index<K> {
    func: IndexFn<K>,
    values: HashMap<String, ObjectSet<K>>,
}

struct Inner<K> {
    objects: HashTable<Entry<K>>,
    namespaces: HashMap<String, ObjectSet<K>>,
    indexes: HashMap<String, Index<K>>,
    state: DefaultHashBuilder,
    /// The sum of the entries' sizes.
    bytes: u64,
}

impl<K: Resource> Inner<K> {
    /// [`Store::apply`] under the lock.
    fn apply(
        &mut self,
        obj: Arc<K>,
        size: usize,
        epoch: Epoch,
        panics: &mut Vec<IndexPanic>,
    ) -> Applied<K> {
        let inner = self;
        let size = u32::try_from(size).unwrap_or(u32::MAX);
        let (ns, name) = key_of(&*obj);
        let hash = inner.hash(ns, name);
        let rv = obj.meta().resource_version.as_deref();
        let unchanged = rv.is_some()
            && inner
                .objects
                .find(hash, |e| is(&*e.obj, ns, name))
                .is_some_and(|e| e.obj.meta().resource_version.as_deref() == rv);
        if unchanged {
            inner.touch(hash, ns, name, epoch);
            return Applied::Unchanged;
        }
        // Every value, old and new, is computed before anything changes: a panic leaves the
        // store as it was.
        let new_values = match inner.values_of(&obj) {
            Ok(values) => values,
            Err((index, message)) => {
                inner.touch(hash, ns, name, epoch);
                panics.push(IndexPanic {
                    index,
                    key: ObjectKey::of(&*obj),
                    message,
                });
                return Applied::Skipped;
            }
        };
        let old_values = inner
            .objects
            .find(hash, |e| is(&*e.obj, ns, name))
            .map(|e| inner.old_values_of(&e.obj, panics));
        let state = &inner.state;
        match inner.objects.entry(
            hash,
            |e| is(&*e.obj, ns, name),
            |e| hash_obj(state, &*e.obj),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut slot) => {
                let entry = slot.get_mut();
                entry.epoch = epoch;
                inner.bytes = inner.bytes - u64::from(entry.size) + u64::from(size);
                entry.size = size;
                let new = obj;
                let old = std::mem::replace(&mut entry.obj, Arc::clone(&new));
                inner.reindex(
                    Some((&old, old_values.unwrap_or_default())),
                    Some((&new, new_values)),
                );
                Applied::Updated { old, new }
            }
            hashbrown::hash_table::Entry::Vacant(slot) => {
                let new = obj;
                slot.insert(Entry {
                    obj: Arc::clone(&new),
                    epoch,
                    size,
                });
                inner.bytes += u64::from(size);
                inner.reindex(None, Some((&new, new_values)));
                Applied::Added(new)
            }
        }
    }

    /// [`Store::sweep`] under the lock.
    fn sweep(&mut self, epoch: Epoch, panics: &mut Vec<IndexPanic>) -> Vec<Arc<K>> {
        let inner = self;
        let mut freed = 0;
        let gone: Vec<(Arc<K>, OldValues)> = inner
            .objects
            .iter()
            .filter(|e| e.epoch != epoch)
            .map(|e| {
                freed += u64::from(e.size);
                (Arc::clone(&e.obj), inner.old_values_of(&e.obj, panics))
            })
            .collect();
        inner.bytes -= freed;
        inner.objects.retain(|e| e.epoch == epoch);
        gone.into_iter()
            .map(|(obj, values)| {
                inner.reindex(Some((&obj, values)), None);
                obj
            })
            .collect()
    }
}

impl<K> Drop for Inner<K> {
    /// The last handle to a large store is gone (its informer stopped, and nothing holds
    /// the store): its objects are freed first, then the allocator is asked to give the
    /// memory back to the system (see [`crate::release`]).
    fn drop(&mut self) {
        let large = self.objects.len() >= crate::release::LARGE_STORE;
        self.objects = HashTable::new();
        self.namespaces = HashMap::new();
        self.indexes = HashMap::new();
        if large {
            crate::release::give_back_freed_memory();
        }
    }
}

fn key_of<K: Resource>(obj: &K) -> (Option<&str>, &str) {
    let meta = obj.meta();
    (
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

fn is<K: Resource>(obj: &K, namespace: Option<&str>, name: &str) -> bool {
    key_of(obj) == (namespace, name)
}

fn hash_obj<K: Resource>(state: &DefaultHashBuilder, obj: &K) -> u64 {
    state.hash_one(key_of(obj))
}

/// Puts `obj` into `set`, replacing the object with the same key if there is one.
fn put<K: Resource>(state: &DefaultHashBuilder, set: &mut ObjectSet<K>, obj: &Arc<K>) {
    let (ns, name) = key_of(&**obj);
    let hash = state.hash_one((ns, name));
    match set.entry(hash, |o| is(&**o, ns, name), |o| hash_obj(state, &**o)) {
        hashbrown::hash_table::Entry::Occupied(mut slot) => *slot.get_mut() = Arc::clone(obj),
        hashbrown::hash_table::Entry::Vacant(slot) => {
            slot.insert(Arc::clone(obj));
        }
    }
}

/// Takes the object with `obj`'s key out of `set`; says whether `set` is now empty.
fn take<K: Resource>(state: &DefaultHashBuilder, set: &mut ObjectSet<K>, obj: &K) -> bool {
    let (ns, name) = key_of(obj);
    if let Ok(slot) = set.find_entry(state.hash_one((ns, name)), |o| is(&**o, ns, name)) {
        slot.remove();
    }
    set.is_empty()
}

impl<K: Resource> Inner<K> {
    fn hash(&self, namespace: Option<&str>, name: &str) -> u64 {
        self.state.hash_one((namespace, name))
    }

    /// Stamps the stored object with this key, if any, as seen in list `epoch`.
    fn touch(&mut self, hash: u64, namespace: Option<&str>, name: &str, epoch: Epoch) -> bool {
        match self
            .objects
            .find_mut(hash, |e| is(&*e.obj, namespace, name))
        {
            Some(entry) => {
                entry.epoch = epoch;
                true
            }
            None => false,
        }
    }

    /// `obj`'s values in every user index, in the order of `self.indexes` (which does not
    /// change while the write lock is held), or the name of the index whose function
    /// panicked and the message. The functions get a shared reference and nothing else, and
    /// nothing is changed here, so a panic leaves the store as it was.
    fn values_of(&self, obj: &K) -> Result<Vec<Vec<String>>, (String, String)> {
        self.indexes
            .iter()
            .map(|(name, idx)| unwind::catch(|| (idx.func)(obj)).map_err(|m| (name.clone(), m)))
            .collect()
    }

    /// Like [`values_of`](Self::values_of) for a stored object about to be replaced or
    /// removed, with `None` for an index whose function panicked (pushed onto `panics`).
    fn old_values_of(&self, obj: &K, panics: &mut Vec<IndexPanic>) -> OldValues {
        self.indexes
            .iter()
            .map(|(name, idx)| match unwind::catch(|| (idx.func)(obj)) {
                Ok(values) => Some(values),
                Err(message) => {
                    panics.push(IndexPanic {
                        index: name.clone(),
                        key: ObjectKey::of(obj),
                        message,
                    });
                    None
                }
            })
            .collect()
    }

    /// Moves an object in the namespace index and every user index from the values of
    /// `old` to those of `new` (either may be absent; each comes with its values from
    /// [`values_of`](Self::values_of) or [`old_values_of`](Self::old_values_of)), replacing
    /// the stored `Arc` where the value stays. Calls no user code.
    fn reindex(
        &mut self,
        old: Option<(&Arc<K>, OldValues)>,
        new: Option<(&Arc<K>, Vec<Vec<String>>)>,
    ) {
        let state = &self.state;
        let (old, mut old_values) = match old {
            Some((o, values)) => (Some(o), values.into_iter()),
            None => (None, Vec::new().into_iter()),
        };
        let (new, mut new_values) = match new {
            Some((n, values)) => (Some(n), values.into_iter()),
            None => (None, Vec::new().into_iter()),
        };
        let old_ns = old.and_then(|o| o.meta().namespace.as_deref());
        let new_ns = new.and_then(|n| n.meta().namespace.as_deref());
        if let (Some(ns), Some(o)) = (old_ns, old)
            && new_ns != Some(ns)
            && let Some(set) = self.namespaces.get_mut(ns)
            && take(state, set, o)
        {
            self.namespaces.remove(ns);
        }
        if let (Some(ns), Some(n)) = (new_ns, new) {
            put(state, self.namespaces.entry_ref(ns).or_default(), n);
        }
        for idx in self.indexes.values_mut() {
            let new_values = new_values.next().unwrap_or_default();
            if let Some(o) = old {
                match old_values.next().flatten() {
                    Some(old_values) => {
                        for value in &old_values {
                            if new_values.contains(value) {
                                continue;
                            }
                            if let Some(set) = idx.values.get_mut(value.as_str())
                                && take(state, set, o)
                            {
                                idx.values.remove(value.as_str());
                            }
                        }
                    }
                    // The function panicked on the old object: look for it under every value.
                    None => idx.values.retain(|_, set| !take(state, set, o)),
                }
            }
            if let Some(n) = new {
                for value in new_values {
                    put(state, idx.values.entry(value).or_default(), n);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(ns: &str, name: &str, rv: &str, team: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                labels: Some([("team".to_owned(), team.to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn team_index(store: &Store<ConfigMap>) {
        store
            .add_index("team", |c: &ConfigMap| {
                c.metadata
                    .labels
                    .iter()
                    .flatten()
                    .filter(|(k, _)| *k == "team")
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap();
    }

    fn names(objs: &[Arc<ConfigMap>]) -> Vec<String> {
        let mut n: Vec<String> = objs
            .iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn apply_reports_added_updated_and_unchanged_by_resource_version() {
        let store = Store::new();
        assert!(matches!(
            store.apply(cm("a", "x", "1", "red"), 0, 0, &mut Vec::new()),
            Applied::Added(_)
        ));
        assert!(matches!(
            store.apply(cm("a", "x", "1", "blue"), 0, 0, &mut Vec::new()),
            Applied::Unchanged
        ));
        assert_eq!(
            store
                .get(&ObjectKey::namespaced("a", "x"))
                .unwrap()
                .metadata
                .labels
                .as_ref()
                .unwrap()["team"],
            "red"
        );
        match store.apply(cm("a", "x", "2", "blue"), 0, 0, &mut Vec::new()) {
            Applied::Updated { old, new } => {
                assert_eq!(old.metadata.resource_version.as_deref(), Some("1"));
                assert_eq!(new.metadata.resource_version.as_deref(), Some("2"));
            }
            _ => panic!("expected an update"),
        }
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn the_total_size_follows_every_change_without_measuring_again() {
        let store = Store::new();
        team_index(&store);
        let mut panics = Vec::new();
        store.apply(cm("a", "x", "1", "red"), 100, 1, &mut panics);
        store.apply(cm("a", "y", "1", "red"), 40, 1, &mut panics);
        assert_eq!(store.bytes(), 140);
        // Unchanged (same resourceVersion): the size given is not taken.
        store.apply(cm("a", "x", "1", "red"), 999, 1, &mut panics);
        assert_eq!(store.bytes(), 140);
        // An update takes the old object's kept size away.
        store.apply(cm("a", "x", "2", "red"), 70, 1, &mut panics);
        assert_eq!(store.bytes(), 110);
        // An object an index function panics on is not stored, nor counted.
        store
            .add_index("boom", |c: &ConfigMap| {
                assert!(c.metadata.name.as_deref() != Some("z"), "boom");
                Vec::new()
            })
            .unwrap();
        assert!(matches!(
            store.apply(cm("a", "z", "1", "red"), 5, 1, &mut panics),
            Applied::Skipped
        ));
        assert_eq!(store.bytes(), 110);
        store.remove(&ObjectKey::namespaced("a", "y"), &mut panics);
        assert_eq!(store.bytes(), 70);
        // A relist that brings a changed x and a new w, and not y: x's old size goes.
        let (applied, gone) = store.replace(
            vec![
                (cm("a", "x", "3", "red"), 20),
                (cm("a", "w", "1", "red"), 8),
            ],
            2,
            &mut panics,
        );
        assert_eq!((applied.len(), gone.len()), (2, 0));
        assert_eq!(store.bytes(), 28);
        // A list that stamps nothing: everything goes.
        assert_eq!(store.sweep(3, &mut panics).len(), 2);
        assert_eq!(store.bytes(), 0);
        assert_eq!(panics.len(), 1, "{panics:?}");
        // Sizes past `u32::MAX` are kept at it, and still taken away whole.
        store.apply(cm("a", "huge", "1", "red"), usize::MAX, 4, &mut panics);
        assert_eq!(store.bytes(), u64::from(u32::MAX));
        store.remove(&ObjectKey::namespaced("a", "huge"), &mut panics);
        assert_eq!(store.bytes(), 0);
    }

    #[test]
    fn namespace_index_follows_adds_and_removes() {
        let store = Store::new();
        store.apply(cm("a", "x", "1", "red"), 0, 0, &mut Vec::new());
        store.apply(cm("a", "y", "1", "red"), 0, 0, &mut Vec::new());
        store.apply(cm("b", "x", "1", "red"), 0, 0, &mut Vec::new());
        assert_eq!(names(&store.list_namespace("a")), ["x", "y"]);
        assert_eq!(names(&store.by_index(NAMESPACE_INDEX, "b").unwrap()), ["x"]);
        store.remove(&ObjectKey::namespaced("a", "x"), &mut Vec::new());
        assert_eq!(names(&store.list_namespace("a")), ["y"]);
        store.remove(&ObjectKey::namespaced("b", "x"), &mut Vec::new());
        assert!(store.list_namespace("b").is_empty());
        let mut values = store.index_values(NAMESPACE_INDEX).unwrap();
        values.sort();
        assert_eq!(values, ["a"]);
    }

    #[test]
    fn user_index_moves_objects_on_update_and_forgets_them_on_delete() {
        let store = Store::new();
        team_index(&store);
        store.apply(cm("a", "x", "1", "red"), 0, 0, &mut Vec::new());
        store.apply(cm("a", "y", "1", "red"), 0, 0, &mut Vec::new());
        assert_eq!(names(&store.by_index("team", "red").unwrap()), ["x", "y"]);

        store.apply(cm("a", "x", "2", "blue"), 0, 0, &mut Vec::new());
        assert_eq!(names(&store.by_index("team", "red").unwrap()), ["y"]);
        assert_eq!(names(&store.by_index("team", "blue").unwrap()), ["x"]);

        store.remove(&ObjectKey::namespaced("a", "y"), &mut Vec::new());
        assert!(store.by_index("team", "red").unwrap().is_empty());
        assert_eq!(store.index_values("team").unwrap(), ["blue"]);
    }

    #[test]
    fn lookups_return_the_newest_version_when_index_values_do_not_change() {
        let store = Store::new();
        team_index(&store);
        store.apply(cm("a", "x", "1", "red"), 0, 0, &mut Vec::new());
        store.apply(cm("a", "x", "2", "red"), 0, 0, &mut Vec::new());
        let rv = |objs: Vec<Arc<ConfigMap>>| objs[0].metadata.resource_version.clone().unwrap();
        assert_eq!(rv(store.by_index("team", "red").unwrap()), "2");
        assert_eq!(rv(store.list_namespace("a")), "2");
        assert_eq!(rv(store.list()), "2");
        assert_eq!(store.keys(), [ObjectKey::namespaced("a", "x")]);
    }

    #[test]
    fn index_added_late_covers_existing_objects() {
        let store = Store::new();
        store.apply(cm("a", "x", "1", "red"), 0, 0, &mut Vec::new());
        team_index(&store);
        assert_eq!(names(&store.by_index("team", "red").unwrap()), ["x"]);
    }

    #[test]
    fn unknown_and_duplicate_indexes_are_errors() {
        let store = Store::<ConfigMap>::new();
        assert!(matches!(
            store.by_index("nope", "x"),
            Err(IndexError::Unknown { .. })
        ));
        team_index(&store);
        let again = store.add_index("team", |_: &ConfigMap| Vec::new());
        assert!(matches!(again, Err(IndexError::Exists { .. })));
        let builtin = store.add_index(NAMESPACE_INDEX, |_: &ConfigMap| Vec::new());
        assert!(matches!(builtin, Err(IndexError::Exists { .. })));
    }

    #[test]
    fn sweep_removes_what_a_relist_did_not_see() {
        let store = Store::new();
        team_index(&store);
        store.apply(cm("a", "x", "1", "red"), 0, 1, &mut Vec::new());
        store.apply(cm("a", "y", "1", "red"), 0, 1, &mut Vec::new());
        store.apply(cm("a", "z", "1", "red"), 0, 1, &mut Vec::new());
        // Relist 2 sees x unchanged and z changed; y is gone.
        assert!(matches!(
            store.apply(cm("a", "x", "1", "red"), 0, 2, &mut Vec::new()),
            Applied::Unchanged
        ));
        assert!(matches!(
            store.apply(cm("a", "z", "2", "blue"), 0, 2, &mut Vec::new()),
            Applied::Updated { .. }
        ));
        let gone = store.sweep(2, &mut Vec::new());
        assert_eq!(names(&gone), ["y"]);
        assert_eq!(names(&store.list()), ["x", "z"]);
        assert_eq!(names(&store.by_index("team", "red").unwrap()), ["x"]);
    }

    #[test]
    fn cluster_scoped_objects_are_not_in_the_namespace_index() {
        let store = Store::new();
        let mut obj = cm("a", "x", "1", "red");
        Arc::make_mut(&mut obj).metadata.namespace = None;
        store.apply(obj, 0, 0, &mut Vec::new());
        assert!(store.get(&ObjectKey::cluster("x")).is_some());
        assert!(store.index_values(NAMESPACE_INDEX).unwrap().is_empty());
    }

    /// The `team` index, panicking on objects whose team is `boom`.
    fn boom_index(store: &Store<ConfigMap>) -> Result<(), IndexError> {
        store.add_index("team", |c: &ConfigMap| {
            let team = c.metadata.labels.as_ref().unwrap()["team"].clone();
            assert!(team != "boom", "no team may be called boom");
            vec![team]
        })
    }

    #[test]
    fn an_index_function_panic_leaves_the_object_out_of_the_store_and_every_index() {
        let store = Store::new();
        boom_index(&store).unwrap();
        let mut panics = Vec::new();
        store.apply(cm("a", "x", "1", "red"), 0, 1, &mut panics);
        assert!(matches!(
            store.apply(cm("a", "bad", "1", "boom"), 0, 1, &mut panics),
            Applied::Skipped
        ));
        assert_eq!(panics.len(), 1);
        assert_eq!(panics[0].index, "team");
        assert_eq!(panics[0].key, ObjectKey::namespaced("a", "bad"));
        assert!(panics[0].message.contains("no team may be called boom"));
        assert!(!store.inner.is_poisoned());
        assert!(store.get(&ObjectKey::namespaced("a", "bad")).is_none());
        assert_eq!(names(&store.list()), ["x"]);
        assert_eq!(names(&store.list_namespace("a")), ["x"]);
        assert_eq!(store.index_values("team").unwrap(), ["red"]);

        // An update it panics on keeps the last good version, filed as before, and a
        // relist that sees the bad version again does not sweep it.
        store.apply(cm("a", "x", "2", "boom"), 0, 2, &mut panics);
        assert_eq!(panics.len(), 2);
        assert!(store.sweep(2, &mut panics).is_empty());
        let x = store.by_index("team", "red").unwrap();
        assert_eq!(x[0].metadata.resource_version.as_deref(), Some("1"));
        assert_eq!(store.index_values("team").unwrap(), ["red"]);

        // The store goes on working.
        store.apply(cm("a", "y", "1", "blue"), 0, 2, &mut panics);
        assert_eq!(names(&store.by_index("team", "blue").unwrap()), ["y"]);
        assert_eq!(panics.len(), 2);
    }

    #[test]
    fn an_index_that_panics_on_a_stored_object_is_not_added() {
        let store = Store::new();
        store.apply(cm("a", "x", "1", "red"), 0, 0, &mut Vec::new());
        store.apply(cm("a", "bad", "1", "boom"), 0, 0, &mut Vec::new());
        let err = boom_index(&store).unwrap_err();
        assert!(
            matches!(&err, IndexError::Panicked { name, object, .. } if name == "team" && object == "a/bad"),
            "{err}"
        );
        assert!(!store.inner.is_poisoned());
        assert!(matches!(
            store.by_index("team", "red"),
            Err(IndexError::Unknown { .. })
        ));
        assert_eq!(names(&store.list()), ["bad", "x"]);
        // The name is still free.
        team_index(&store);
        assert_eq!(names(&store.by_index("team", "red").unwrap()), ["x"]);
    }

    #[test]
    fn an_object_the_index_function_turns_to_panic_on_is_still_removed_from_it() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let store = Store::new();
        let broken = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&broken);
        store
            .add_index("team", move |c: &ConfigMap| {
                assert!(!flag.load(Ordering::SeqCst), "broken");
                vec![c.metadata.labels.as_ref().unwrap()["team"].clone()]
            })
            .unwrap();
        let mut panics = Vec::new();
        for name in ["x", "y", "z"] {
            store.apply(cm("a", name, "1", "red"), 0, 1, &mut panics);
        }
        store.apply(cm("a", "w", "1", "blue"), 0, 1, &mut panics);
        broken.store(true, Ordering::SeqCst);

        assert!(
            store
                .remove(&ObjectKey::namespaced("a", "x"), &mut panics)
                .is_some()
        );
        assert_eq!(panics.len(), 1);
        assert_eq!(names(&store.by_index("team", "red").unwrap()), ["y", "z"]);
        store.apply(cm("a", "y", "1", "red"), 0, 2, &mut panics);
        let swept = store.sweep(2, &mut panics);
        assert_eq!(names(&swept), ["w", "z"]);
        assert_eq!(panics.len(), 3);
        assert_eq!(names(&store.by_index("team", "red").unwrap()), ["y"]);
        assert_eq!(store.index_values("team").unwrap(), ["red"]);
        assert!(!store.inner.is_poisoned());
    }
}
