//! [`Lenient`]: decodes each object of a list or watch on its own, so one object that does
//! not fit the Rust type is skipped instead of failing its whole list page.
//!
//! kube-client decodes a list response as one `ObjectList<K>`: a single object that does not
//! decode into `K` (a custom resource written under an older schema, a field the Rust type
//! is stricter about than the CRD) fails the page, and the informer could never sync; every
//! other object of the type would wait for it. Watching `Lenient<K>` instead, each item is
//! captured as raw JSON and decoded into `K` separately; an item that does not decode
//! becomes [`Lenient::Malformed`], with whatever metadata could be read from it.

use std::borrow::Cow;
use std::fmt;

use kube::Resource;
use kube::core::{DynamicResourceScope, ObjectMeta};
use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// An object of type `K`, or one that did not decode into it: list or watch `Api<Lenient<K>>`
/// (made with `Api::namespaced_with` / `Api::all_with`) to get every good object of a page
/// that holds a bad one. It works with kube-client's JSON decoding, which captures each item
/// as raw text first.
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::core::ObjectList;
/// use rudder_cache::Lenient;
///
/// let page = r#"{"metadata": {}, "items": [
///     {"metadata": {"name": "good"}, "data": {"k": "v"}},
///     {"metadata": {"name": "bad"}, "data": {"k": 42}}
/// ]}"#;
/// let list: ObjectList<Lenient<ConfigMap>> = serde_json::from_str(page).unwrap();
/// assert!(matches!(&list.items[0], Lenient::Ok(_)));
/// assert!(matches!(&list.items[1], Lenient::Malformed(m) if m.metadata.name.as_deref() == Some("bad")));
/// ```
#[derive(Clone, Debug)]
pub enum Lenient<K> {
    /// The object.
    Ok(K),
    /// What could be read of an object that did not decode.
    Malformed(Box<Malformed>),
}

/// An object that did not decode into its type.
#[derive(Clone, Debug)]
pub struct Malformed {
    /// Its metadata, or the default if even that did not decode.
    pub metadata: ObjectMeta,
    /// Why it did not decode.
    pub error: String,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.metadata.namespace, &self.metadata.name) {
            (Some(ns), Some(name)) => write!(f, "{ns}/{name}: {}", self.error),
            (None, Some(name)) => write!(f, "{name}: {}", self.error),
            _ => write!(f, "(unnamed): {}", self.error),
        }
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if reads_json_text::<D>() {
            // The raw text is only scanned here (and borrowed, not copied); `K` is decoded
            // from it.
            let raw = <&RawValue>::deserialize(deserializer)?;
            Ok(Self::decode(raw.get(), |text: &str| {
                serde_json::from_str(text)
            }))
        } else {
            // Any other deserializer (serde's buffer for a watch event whose `object` came
            // before its `type`, or a `serde_json::Value`) cannot hand over raw text: go
            // through a `Value`, which costs more but decodes the same.
            let value = serde_json::Value::deserialize(deserializer)?;
            Ok(Self::decode(&value, |value: &serde_json::Value| {
                K::deserialize(value)
            }))
        }
    }
}

/// Whether `D` is serde_json's own deserializer over text in memory (what kube-client
/// decodes lists and watch events with), the one that can lend a `RawValue`. A name check
/// on a type known at compile time: if the name ever reads differently, the slower path is
/// taken, never a wrong one.
fn reads_json_text<'de, D: Deserializer<'de>>() -> bool {
    let name = std::any::type_name::<D>();
    name.starts_with("&mut serde_json::de::Deserializer<serde_json::read::StrRead")
        || name.starts_with("&mut serde_json::de::Deserializer<serde_json::read::SliceRead")
}

impl<K: DeserializeOwned> Lenient<K> {
    /// `K` from `source`, or what can be read of it.
    fn decode<S>(source: &S, parse: impl FnOnce(&S) -> serde_json::Result<K>) -> Self
    where
        S: ReadMetadata + ?Sized,
    {
        match parse(source) {
            Ok(object) => Self::Ok(object),
            Err(error) => Self::Malformed(Box::new(Malformed {
                metadata: source.metadata().unwrap_or_default(),
                error: error.to_string(),
            })),
        }
    }
}

/// Reads only `metadata` out of an object that did not decode.
trait ReadMetadata {
    fn metadata(&self) -> Option<ObjectMeta>;
}

#[derive(Deserialize)]
struct MetadataOnly {
    #[serde(default)]
    metadata: ObjectMeta,
}

impl ReadMetadata for str {
    fn metadata(&self) -> Option<ObjectMeta> {
        serde_json::from_str::<MetadataOnly>(self)
            .ok()
            .map(|m| m.metadata)
    }
}

impl ReadMetadata for serde_json::Value {
    fn metadata(&self) -> Option<ObjectMeta> {
        serde_json::from_value(self.get("metadata")?.clone()).ok()
    }
}

/// Only for the `Api`'s bounds: a lenient informer never writes.
impl<K: Serialize> Serialize for Lenient<K> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Ok(object) => object.serialize(serializer),
            Self::Malformed(m) => m.metadata.serialize(serializer),
        }
    }
}

/// `K`'s identity; the scope is dynamic so an `Api` can be made for any `K`.
impl<K: Resource> Resource for Lenient<K> {
    type DynamicType = K::DynamicType;
    type Scope = DynamicResourceScope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn metadata_api() -> bool {
        K::metadata_api()
    }
    fn url_path(dt: &Self::DynamicType, namespace: Option<&str>) -> String {
        K::url_path(dt, namespace)
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Self::Ok(object) => object.meta(),
            Self::Malformed(m) => &m.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Self::Ok(object) => object.meta_mut(),
            Self::Malformed(m) => &mut m.metadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::ObjectList;

    use super::*;

    #[test]
    fn a_page_with_a_bad_item_keeps_the_good_ones() {
        let page = r#"{
            "apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "7"},
            "items": [
                {"metadata": {"name": "good", "namespace": "ns"}, "data": {"k": "v"}},
                {"metadata": {"name": "bad", "namespace": "ns"}, "data": {"k": 42}},
                {"metadata": {"name": 3}, "data": {}}
            ]
        }"#;
        assert!(serde_json::from_str::<ObjectList<ConfigMap>>(page).is_err());
        let list: ObjectList<Lenient<ConfigMap>> = serde_json::from_str(page).unwrap();
        let items: Vec<_> = list.items.into_iter().collect();
        assert!(matches!(&items[0], Lenient::Ok(cm) if cm.data.as_ref().unwrap()["k"] == "v"));
        let Lenient::Malformed(bad) = &items[1] else {
            panic!("{:?}", items[1]);
        };
        assert_eq!(bad.metadata.name.as_deref(), Some("bad"));
        assert!(
            bad.to_string()
                .starts_with("ns/bad: invalid type: integer `42`"),
            "{bad}"
        );
        let Lenient::Malformed(unnamed) = &items[2] else {
            panic!("{:?}", items[2]);
        };
        assert!(unnamed.to_string().starts_with("(unnamed): "), "{unnamed}");
    }

    #[test]
    fn serde_jsons_text_deserializers_take_the_raw_path() {
        assert!(reads_json_text::<
            &mut serde_json::Deserializer<serde_json::de::StrRead<'_>>,
        >());
        assert!(reads_json_text::<
            &mut serde_json::Deserializer<serde_json::de::SliceRead<'_>>,
        >());
        assert!(!reads_json_text::<serde_json::Value>());
        assert!(!reads_json_text::<
            &mut serde_json::Deserializer<serde_json::de::IoRead<&[u8]>>,
        >());
    }

    #[test]
    fn any_key_order_and_any_deserializer_decode_the_same() {
        let good = r#"{"metadata":{"name":"good"},"data":{"k":"v"}}"#;
        let bad = r#"{"metadata":{"name":"bad"},"data":{"k":1}}"#;
        for object in [good, bad] {
            // `object` before `type`: serde buffers the object before it knows the variant.
            let lines = [
                format!(r#"{{"type":"ADDED","object":{object}}}"#),
                format!(r#"{{"object":{object},"type":"ADDED"}}"#),
            ];
            let decoded: Vec<_> = lines
                .iter()
                .map(|line| {
                    let event: kube::core::WatchEvent<Lenient<ConfigMap>> =
                        serde_json::from_str(line).unwrap();
                    let kube::core::WatchEvent::Added(item) = event else {
                        panic!("{line}");
                    };
                    item
                })
                .collect();
            let value: Lenient<ConfigMap> =
                serde_json::from_value(serde_json::from_str(object).unwrap()).unwrap();
            for item in decoded.iter().chain([&value]) {
                match (object == good, item) {
                    (true, Lenient::Ok(cm)) => assert_eq!(cm.data.as_ref().unwrap()["k"], "v"),
                    (false, Lenient::Malformed(m)) => {
                        assert_eq!(m.metadata.name.as_deref(), Some("bad"));
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    #[test]
    fn watch_events_decode_each_object_on_its_own() {
        let line = r#"{"type":"MODIFIED","object":{"metadata":{"name":"bad"},"data":{"k":[]}}}"#;
        let event: kube::core::WatchEvent<Lenient<ConfigMap>> = serde_json::from_str(line).unwrap();
        assert!(matches!(
            event,
            kube::core::WatchEvent::Modified(Lenient::Malformed(_))
        ));
    }
}
