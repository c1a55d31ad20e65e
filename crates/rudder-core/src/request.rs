//! [`Request`]: the key a reconciler receives.

use std::fmt;
use std::sync::Arc;

use kube::Resource;

/// What a reconciler is asked to reconcile: an object's namespace (none for cluster-scoped
/// objects) and name. It is the work queue's key, so it is cheap to clone (two reference
/// counts) and compares by value.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    namespace: Option<Arc<str>>,
    name: Arc<str>,
}

impl Request {
    /// A request for the object `name` in `namespace` (`None` for a cluster-scoped object).
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self {
            namespace: namespace.map(Arc::from),
            name: Arc::from(name),
        }
    }

    /// A request for a namespaced object.
    pub fn namespaced(namespace: &str, name: &str) -> Self {
        Self::new(Some(namespace), name)
    }

    /// A request for a cluster-scoped object.
    pub fn cluster(name: &str) -> Self {
        Self::new(None, name)
    }

    /// The request for `object`, or `None` if it has no name (an object not yet created).
    pub fn from_object<K: Resource>(object: &K) -> Option<Self> {
        let meta = object.meta();
        let name = meta.name.as_deref()?;
        Some(Self::new(meta.namespace.as_deref(), name))
    }

    /// The namespace, if the object is namespaced.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for Request {
    /// `namespace/name`, or `name` for a cluster-scoped object.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Request({self})")
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::core::ObjectMeta;

    use super::*;

    #[test]
    fn from_objects_of_both_scopes() {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("cm".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        let r = Request::from_object(&cm);
        assert_eq!(r, Some(Request::namespaced("ns", "cm")));
        assert_eq!(r.map(|r| r.to_string()).as_deref(), Some("ns/cm"));
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        assert_eq!(Request::from_object(&ns), Some(Request::cluster("ns")));
        assert_eq!(Request::from_object(&ConfigMap::default()), None);
    }
}
