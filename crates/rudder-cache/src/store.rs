//! The indexed object store behind every informer: `Arc<K>` by namespace/name, plus indexes.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use kube::Resource;

use crate::error::IndexError;

/// The name of the built-in index from namespace to objects, usable with [`Store::by_index`].
///
/// Cluster-scoped objects are not in it.
pub const NAMESPACE_INDEX: &str = "namespace";

/// A function from an object to the values it is filed under in one index.
///
/// It must be deterministic: the store calls it again on the old object when that object is
/// replaced or deleted, to find the entries to remove.
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
        // A panic in an index function while the lock was held leaves the maps consistent for
        // reading (each step is a single insert or remove), so a poisoned lock is still usable.
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner<K>> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
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
            for value in (idx.func)(&entry.obj) {
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

    /// Stores `obj`, stamped as seen in list `epoch`; says whether it was new, changed
    /// (a different `resourceVersion`) or unchanged. An unchanged object is dropped and the
    /// stored `Arc` kept, so a relist does not hold a second copy of what did not change.
    pub(crate) fn apply(&self, obj: K, epoch: u64) -> Applied<K> {
        let mut guard = self.write();
        let inner = &mut *guard;
        let (ns, name) = key_of(&obj);
        let hash = inner.hash(ns, name);
        let state = &inner.state;
        match inner.objects.entry(
            hash,
            |e| is(&*e.obj, ns, name),
            |e| hash_obj(state, &*e.obj),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut slot) => {
                let entry = slot.get_mut();
                entry.epoch = epoch;
                let old_rv = entry.obj.meta().resource_version.as_deref();
                if old_rv.is_some() && old_rv == obj.meta().resource_version.as_deref() {
                    return Applied::Unchanged;
                }
                let new = Arc::new(obj);
                let old = std::mem::replace(&mut entry.obj, Arc::clone(&new));
                inner.reindex(Some(&old), Some(&new));
                Applied::Updated { old, new }
            }
            hashbrown::hash_table::Entry::Vacant(slot) => {
                let new = Arc::new(obj);
                slot.insert(Entry {
                    obj: Arc::clone(&new),
                    epoch,
                });
                inner.reindex(None, Some(&new));
                Applied::Added(new)
            }
        }
    }

    /// Removes the object with this key, returning the last stored version.
    pub(crate) fn remove(&self, key: &ObjectKey) -> Option<Arc<K>> {
        let mut guard = self.write();
        let inner = &mut *guard;
        let ns = key.namespace.as_deref();
        let hash = inner.hash(ns, &key.name);
        let (entry, _) = inner
            .objects
            .find_entry(hash, |e| is(&*e.obj, ns, &key.name))
            .ok()?
            .remove();
        inner.reindex(Some(&entry.obj), None);
        Some(entry.obj)
    }

    /// Stamps the object with this key, if stored, as seen in list `epoch`; whether it was.
    pub(crate) fn touch(&self, key: &ObjectKey, epoch: u64) -> bool {
        let mut guard = self.write();
        let inner = &mut *guard;
        let ns = key.namespace.as_deref();
        let hash = inner.hash(ns, &key.name);
        match inner.objects.find_mut(hash, |e| is(&*e.obj, ns, &key.name)) {
            Some(entry) => {
                entry.epoch = epoch;
                true
            }
            None => false,
        }
    }

    /// Removes every object not seen in list `epoch`, returning them.
    pub(crate) fn sweep(&self, epoch: u64) -> Vec<Arc<K>> {
        let mut guard = self.write();
        let inner = &mut *guard;
        let mut gone = Vec::new();
        inner.objects.retain(|e| {
            let keep = e.epoch == epoch;
            if !keep {
                gone.push(Arc::clone(&e.obj));
            }
            keep
        });
        for obj in &gone {
            inner.reindex(Some(obj), None);
        }
        gone
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
}

/// A stored object. The key is not stored beside it: the tables hash and compare the
/// object's own namespace and name, which saves two strings per object.
struct Entry<K> {
    obj: Arc<K>,
    /// The number of the last list (or watch session) the object was seen in.
    epoch: u64,
}

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

    /// Moves an object in the namespace index and every user index from the values of
    /// `old` to those of `new` (either may be absent), replacing the stored `Arc` where the
    /// value stays.
    fn reindex(&mut self, old: Option<&Arc<K>>, new: Option<&Arc<K>>) {
        let state = &self.state;
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
            let old_values = old.map(|o| (idx.func)(o)).unwrap_or_default();
            let new_values = new.map(|n| (idx.func)(n)).unwrap_or_default();
            for value in &old_values {
                if new_values.contains(value) {
                    continue;
                }
                if let (Some(set), Some(o)) = (idx.values.get_mut(value.as_str()), old)
                    && take(state, set, o)
                {
                    idx.values.remove(value.as_str());
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

    fn cm(ns: &str, name: &str, rv: &str, team: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                labels: Some([("team".to_owned(), team.to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
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
            store.apply(cm("a", "x", "1", "red"), 0),
            Applied::Added(_)
        ));
        assert!(matches!(
            store.apply(cm("a", "x", "1", "blue"), 0),
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
        match store.apply(cm("a", "x", "2", "blue"), 0) {
            Applied::Updated { old, new } => {
                assert_eq!(old.metadata.resource_version.as_deref(), Some("1"));
                assert_eq!(new.metadata.resource_version.as_deref(), Some("2"));
            }
            _ => panic!("expected an update"),
        }
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn namespace_index_follows_adds_and_removes() {
        let store = Store::new();
        store.apply(cm("a", "x", "1", "red"), 0);
        store.apply(cm("a", "y", "1", "red"), 0);
        store.apply(cm("b", "x", "1", "red"), 0);
        assert_eq!(names(&store.list_namespace("a")), ["x", "y"]);
        assert_eq!(names(&store.by_index(NAMESPACE_INDEX, "b").unwrap()), ["x"]);
        store.remove(&ObjectKey::namespaced("a", "x"));
        assert_eq!(names(&store.list_namespace("a")), ["y"]);
        store.remove(&ObjectKey::namespaced("b", "x"));
        assert!(store.list_namespace("b").is_empty());
        let mut values = store.index_values(NAMESPACE_INDEX).unwrap();
        values.sort();
        assert_eq!(values, ["a"]);
    }

    #[test]
    fn user_index_moves_objects_on_update_and_forgets_them_on_delete() {
        let store = Store::new();
        team_index(&store);
        store.apply(cm("a", "x", "1", "red"), 0);
        store.apply(cm("a", "y", "1", "red"), 0);
        assert_eq!(names(&store.by_index("team", "red").unwrap()), ["x", "y"]);

        store.apply(cm("a", "x", "2", "blue"), 0);
        assert_eq!(names(&store.by_index("team", "red").unwrap()), ["y"]);
        assert_eq!(names(&store.by_index("team", "blue").unwrap()), ["x"]);

        store.remove(&ObjectKey::namespaced("a", "y"));
        assert!(store.by_index("team", "red").unwrap().is_empty());
        assert_eq!(store.index_values("team").unwrap(), ["blue"]);
    }

    #[test]
    fn lookups_return_the_newest_version_when_index_values_do_not_change() {
        let store = Store::new();
        team_index(&store);
        store.apply(cm("a", "x", "1", "red"), 0);
        store.apply(cm("a", "x", "2", "red"), 0);
        let rv = |objs: Vec<Arc<ConfigMap>>| objs[0].metadata.resource_version.clone().unwrap();
        assert_eq!(rv(store.by_index("team", "red").unwrap()), "2");
        assert_eq!(rv(store.list_namespace("a")), "2");
        assert_eq!(rv(store.list()), "2");
        assert_eq!(store.keys(), [ObjectKey::namespaced("a", "x")]);
    }

    #[test]
    fn index_added_late_covers_existing_objects() {
        let store = Store::new();
        store.apply(cm("a", "x", "1", "red"), 0);
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
        store.apply(cm("a", "x", "1", "red"), 1);
        store.apply(cm("a", "y", "1", "red"), 1);
        store.apply(cm("a", "z", "1", "red"), 1);
        // Relist 2 sees x unchanged and z changed; y is gone.
        assert!(matches!(
            store.apply(cm("a", "x", "1", "red"), 2),
            Applied::Unchanged
        ));
        assert!(matches!(
            store.apply(cm("a", "z", "2", "blue"), 2),
            Applied::Updated { .. }
        ));
        let gone = store.sweep(2);
        assert_eq!(names(&gone), ["y"]);
        assert_eq!(names(&store.list()), ["x", "z"]);
        assert_eq!(names(&store.by_index("team", "red").unwrap()), ["x"]);
    }

    #[test]
    fn cluster_scoped_objects_are_not_in_the_namespace_index() {
        let store = Store::new();
        let mut obj = cm("a", "x", "1", "red");
        obj.metadata.namespace = None;
        store.apply(obj, 0);
        assert!(store.get(&ObjectKey::cluster("x")).is_some());
        assert!(store.index_values(NAMESPACE_INDEX).unwrap().is_empty());
    }
}
