//! The shard fence: what a shard's owner hands its successor so that the successor reconciles
//! no key of the shard on a cache older than the previous owner's last write of it
//! (read-your-writes across a hand-off).
//!
//! As it releases a shard, the owner writes its recent writes of the shard's keys (each key,
//! object and resourceVersion, from the controller's
//! `recent_writes`) into the shard Lease's [`FENCE_ANNOTATION`], with the release itself (one
//! write). The next owner reads the annotation as it takes the Lease over, before it opens
//! the shard, and makes each of those writes one its controller waits for
//! (`expect_writes`): a key whose handed-over writes its cache has not reached is held, as
//! after its own writes. It then removes the annotation with its next write of the Lease.
//!
//! Not covered: an owner that dies or freezes hands nothing over (its successor waits out
//! the Lease instead); writes older than the controller's fence window; and what does not
//! fit [`MAX_FENCE_BYTES`] (the newest writes are kept, the rest counted and logged).

use std::sync::Arc;

use rudder_core::Request;
use rudder_core::writes::{ObjectRef, RecentWrite};
use serde_json::Value;

/// The shard Lease annotation carrying the previous owner's recent writes, as JSON.
pub const FENCE_ANNOTATION: &str = "shard.rudder.dev/fence";

/// The most bytes of writes a fence carries (annotations of one object may total 256 KiB).
pub const MAX_FENCE_BYTES: usize = 128 * 1024;

/// What the ring asks of the sharded controller at a hand-off: its recent writes of a
/// shard's keys as it releases the shard, and to expect the previous owner's as it takes one.
#[derive(Clone)]
pub struct Fence {
    /// The recent writes of the keys of shard `n`, as this replica releases it.
    pub export: Arc<dyn Fn(usize) -> Vec<RecentWrite> + Send + Sync>,
    /// The writes the previous owner of shard `n` handed over, as this replica takes it and
    /// before it opens it.
    pub import: Arc<dyn Fn(usize, Vec<RecentWrite>) + Send + Sync>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence").finish_non_exhaustive()
    }
}

/// The annotation's value for `writes`: a JSON array of `[key namespace, key name, group,
/// resource, namespace, name, resourceVersion]` (namespaces `null` for cluster scope),
/// newest (highest resourceVersion) first, cut at [`MAX_FENCE_BYTES`]; and how many were
/// left out.
pub fn encode(mut writes: Vec<RecentWrite>) -> (String, usize) {
    writes.sort_by(|a, b| order(&b.resource_version).cmp(&order(&a.resource_version)));
    let total = writes.len();
    let mut out = String::from("[");
    let mut kept = 0;
    for write in &writes {
        let entry = Value::Array(vec![
            write.key.namespace().map_or(Value::Null, |n| n.into()),
            write.key.name().into(),
            write.object.group.as_str().into(),
            write.object.resource.as_str().into(),
            write
                .object
                .namespace
                .as_deref()
                .map_or(Value::Null, |n| n.into()),
            write.object.name.as_str().into(),
            write.resource_version.as_str().into(),
        ])
        .to_string();
        if out.len() + entry.len() + 2 > MAX_FENCE_BYTES {
            break;
        }
        if kept > 0 {
            out.push(',');
        }
        out.push_str(&entry);
        kept += 1;
    }
    out.push(']');
    (out, total - kept)
}

/// The writes an annotation's value lists; entries that do not parse are skipped (and
/// counted in the second value), a value that is no JSON array gives none.
pub fn decode(value: &str) -> (Vec<RecentWrite>, usize) {
    let Ok(Value::Array(entries)) = serde_json::from_str::<Value>(value) else {
        return (Vec::new(), usize::from(!value.trim().is_empty()));
    };
    let mut skipped = 0;
    let writes = entries
        .iter()
        .filter_map(|entry| {
            let parsed = parse(entry);
            skipped += usize::from(parsed.is_none());
            parsed
        })
        .collect();
    (writes, skipped)
}

fn parse(entry: &Value) -> Option<RecentWrite> {
    let fields = entry.as_array()?;
    let [key_ns, key_name, group, resource, ns, name, rv] = fields.as_slice() else {
        return None;
    };
    let key = match optional(key_ns)? {
        Some(namespace) => Request::namespaced(namespace, key_name.as_str()?),
        None => Request::cluster(key_name.as_str()?),
    };
    Some(RecentWrite {
        key,
        object: ObjectRef::new(
            group.as_str()?,
            resource.as_str()?,
            optional(ns)?,
            name.as_str()?,
        ),
        resource_version: rv.as_str()?.to_owned(),
    })
}

/// A string or `null`; `None` for anything else.
fn optional(value: &Value) -> Option<Option<&str>> {
    match value {
        Value::Null => Some(None),
        Value::String(s) => Some(Some(s.as_str())),
        _ => None,
    }
}

/// A resourceVersion's place in KEP-5504's order (longer is newer, then digit by digit).
fn order(rv: &str) -> (usize, &str) {
    let rv = rv.trim_start_matches('0');
    (rv.len(), rv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(key: &str, name: &str, rv: &str) -> RecentWrite {
        RecentWrite {
            key: Request::namespaced("ns", key),
            object: ObjectRef::new("apps", "deployments", Some("ns"), name),
            resource_version: rv.into(),
        }
    }

    #[test]
    fn a_fence_round_trips_newest_first() {
        let cluster = RecentWrite {
            key: Request::cluster("node-a"),
            object: ObjectRef::new("", "nodes", None, "node-a"),
            resource_version: "1000".into(),
        };
        let writes = vec![
            write("a", "a-0", "99"),
            cluster.clone(),
            write("b", "b-1", "120"),
        ];
        let (value, left_out) = encode(writes);
        assert_eq!(left_out, 0);
        let (back, skipped) = decode(&value);
        assert_eq!(skipped, 0);
        assert_eq!(
            back,
            [cluster, write("b", "b-1", "120"), write("a", "a-0", "99")]
        );
    }

    #[test]
    fn a_fence_keeps_to_its_size_and_says_what_it_left_out() {
        let writes: Vec<_> = (0..10_000)
            .map(|i| {
                write(
                    &format!("key-{i}"),
                    &format!("object-{i}"),
                    &(1000 + i).to_string(),
                )
            })
            .collect();
        let (value, left_out) = encode(writes);
        assert!(value.len() <= MAX_FENCE_BYTES);
        assert!(left_out > 0);
        let (back, _) = decode(&value);
        assert_eq!(back.len() + left_out, 10_000);
        assert_eq!(back[0].resource_version, "10999", "the newest kept");
    }

    #[test]
    fn garbage_gives_no_writes_and_is_counted() {
        assert_eq!(decode("not json").1, 1);
        assert_eq!(decode("").1, 0);
        let (writes, skipped) = decode(r#"[["ns","a","","configmaps","ns","a","5"],[1,2],"x"]"#);
        assert_eq!(writes.len(), 1);
        assert_eq!(skipped, 2);
    }
}
