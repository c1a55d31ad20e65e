//! What carries an object on the wire: the `k8s\0` magic and `runtime.Unknown` envelope of a
//! response body or a watch event's object, a list's items, a watch event.

use crate::wire::{DecodeError, Reader, Wire, utf8};

/// The four bytes a protobuf response body starts with, before its `runtime.Unknown`.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// A `runtime.Unknown`: the envelope of a protobuf response body and of a watch event's
/// object, borrowing from the bytes it was read from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unknown<'a> {
    /// `typeMeta.apiVersion` (`v1`, `apps/v1`).
    pub api_version: &'a str,
    /// `typeMeta.kind` (`Pod`, `PodList`, `Status`).
    pub kind: &'a str,
    /// The object's own protobuf message: what [`decode`](crate::decode) and a
    /// [`decoder`](crate::decoder) read.
    pub raw: &'a [u8],
    /// Usually empty.
    pub content_encoding: &'a str,
    /// Usually empty (protobuf); the media type when `raw` is something else.
    pub content_type: &'a str,
}

/// Reads the envelope of a protobuf response body or a watch event's object.
///
/// Both forms are accepted: with the `k8s\0` magic first (as the server sends a body, and a
/// watch event's object) or without (the bare `runtime.Unknown` message). A message cannot
/// start with the magic's first byte (`k`, field 13 with the group wire type, which
/// Kubernetes never uses), so the two never mix up.
pub fn unknown(bytes: &[u8]) -> Result<Unknown<'_>, DecodeError> {
    let bytes = bytes.strip_prefix(MAGIC.as_slice()).unwrap_or(bytes);
    let mut out = Unknown::default();
    let mut r = Reader::new(bytes, 0)?;
    while let Some((tag, wire)) = r.key()? {
        let field = match tag {
            1 => "typeMeta",
            2 => "raw",
            3 => "contentEncoding",
            4 => "contentType",
            _ => {
                r.skip(wire)?;
                continue;
            }
        };
        let bytes = Reader::expect(wire, Wire::Bytes)
            .and_then(|()| r.bytes())
            .map_err(|e| e.at("Unknown", field, tag))?;
        match tag {
            1 => {
                let mut meta = Reader::new(bytes, 1)?;
                while let Some((tag, wire)) = meta.key()? {
                    let (field, slot) = match tag {
                        1 => ("apiVersion", &mut out.api_version),
                        2 => ("kind", &mut out.kind),
                        _ => {
                            meta.skip(wire)?;
                            continue;
                        }
                    };
                    Reader::expect(wire, Wire::Bytes)
                        .and_then(|()| meta.bytes())
                        .and_then(utf8)
                        .map(|s| *slot = s)
                        .map_err(|e| e.at("TypeMeta", field, tag).at("Unknown", "typeMeta", 1))?;
                }
            }
            2 => out.raw = bytes,
            3 => out.content_encoding = utf8(bytes).map_err(|e| e.at("Unknown", field, tag))?,
            _ => out.content_type = utf8(bytes).map_err(|e| e.at("Unknown", field, tag))?,
        }
    }
    Ok(out)
}

/// A `XxxList` message (`metadata` = 1, a `ListMeta`; `items` = 2), each item decoded on its
/// own so that one bad item does not lose the others.
#[derive(Debug)]
pub struct List<K> {
    /// `metadata.resourceVersion`; `None` when empty.
    pub resource_version: Option<String>,
    /// `metadata.continue`: the token of the next page; `None` when empty (the last page).
    pub continue_: Option<String>,
    /// `metadata.remainingItemCount`, when the server counted.
    pub remaining_item_count: Option<i64>,
    /// The items, in order.
    pub items: Vec<Result<K, DecodeError>>,
}

/// Reads a list's message (an [`Unknown`]'s `raw`), each item with `item`.
///
/// Errors are the list's own (a bad length, bad metadata); an item that does not decode is
/// an `Err` in [`List::items`] and the rest still are read.
pub fn list<K>(
    raw: &[u8],
    item: fn(&[u8]) -> Result<K, DecodeError>,
) -> Result<List<K>, DecodeError> {
    let mut out = List {
        resource_version: None,
        continue_: None,
        remaining_item_count: None,
        items: Vec::new(),
    };
    let mut r = Reader::new(raw, 0)?;
    while let Some((tag, wire)) = r.key()? {
        match tag {
            1 => {
                Reader::expect(wire, Wire::Bytes).map_err(|e| e.at("List", "metadata", 1))?;
                let bytes = r.bytes()?;
                list_meta(&mut out, bytes).map_err(|e| e.at("List", "metadata", 1))?;
            }
            2 => {
                Reader::expect(wire, Wire::Bytes).map_err(|e| e.at("List", "items", 2))?;
                let bytes = r.bytes()?;
                out.items
                    .push(item(bytes).map_err(|e| e.at("List", "items", 2)));
            }
            _ => r.skip(wire)?,
        }
    }
    Ok(out)
}

fn list_meta<K>(out: &mut List<K>, bytes: &[u8]) -> Result<(), DecodeError> {
    let mut r = Reader::new(bytes, 1)?;
    while let Some((tag, wire)) = r.key()? {
        let string = |r: &mut Reader<'_>, field| {
            Reader::expect(wire, Wire::Bytes)
                .and_then(|()| r.bytes())
                .and_then(utf8)
                .map(|s| (!s.is_empty()).then(|| s.to_owned()))
                .map_err(|e| e.at("ListMeta", field, tag))
        };
        match tag {
            2 => out.resource_version = string(&mut r, "resourceVersion")?,
            3 => out.continue_ = string(&mut r, "continue")?,
            4 => {
                Reader::expect(wire, Wire::Varint)
                    .map_err(|e| e.at("ListMeta", "remainingItemCount", 4))?;
                #[allow(clippy::cast_possible_wrap)]
                let count = r.varint()? as i64;
                out.remaining_item_count = Some(count);
            }
            _ => r.skip(wire)?,
        }
    }
    Ok(())
}

/// A `metav1.WatchEvent`, borrowing from its frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchEvent<'a> {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub type_: &'a str,
    /// The object's bytes (its `RawExtension`'s `raw`): the `k8s\0` magic and an
    /// [`Unknown`] envelope, which [`unknown`] reads. An `ERROR` event's object is a
    /// `Status`.
    pub object: &'a [u8],
}

/// Reads one watch frame's payload: the bytes after the 4-byte big-endian length the caller
/// has read (`type` = 1, `object` = 2, a `RawExtension` whose `raw` = 1).
pub fn watch_event(frame: &[u8]) -> Result<WatchEvent<'_>, DecodeError> {
    let mut out = WatchEvent::default();
    let mut r = Reader::new(frame, 0)?;
    while let Some((tag, wire)) = r.key()? {
        match tag {
            1 => {
                out.type_ = Reader::expect(wire, Wire::Bytes)
                    .and_then(|()| r.bytes())
                    .and_then(utf8)
                    .map_err(|e| e.at("WatchEvent", "type", 1))?;
            }
            2 => {
                Reader::expect(wire, Wire::Bytes).map_err(|e| e.at("WatchEvent", "object", 2))?;
                let bytes = r.bytes()?;
                let mut raw = Reader::new(bytes, 1)?;
                while let Some((tag, wire)) = raw.key()? {
                    if tag == 1 {
                        out.object = Reader::expect(wire, Wire::Bytes)
                            .and_then(|()| raw.bytes())
                            .map_err(|e| {
                                e.at("RawExtension", "raw", 1).at("WatchEvent", "object", 2)
                            })?;
                    } else {
                        raw.skip(wire)?;
                    }
                }
            }
            _ => r.skip(wire)?,
        }
    }
    Ok(out)
}
