//! The protobuf wire format: varints, keys, length-delimited fields, skipping, and the error
//! every decoder returns.

use std::fmt;

/// How deep messages may nest inside one another before decoding stops with an error.
///
/// Kubernetes' deepest objects are CustomResourceDefinitions, whose OpenAPI schemas nest
/// three messages a level (`JSONSchemaProps`, a map entry, `JSONSchemaProps`); 250 messages
/// is over 80 schema levels, far past any real CRD, and bounds the stack a hostile body can
/// make the decoder use.
pub const MAX_DEPTH: u32 = 250;

/// Why decoding failed, and where: the message type, field and tag, innermost last.
///
/// Its [`Display`](fmt::Display) reads like
/// `Pod.spec (tag 2) > PodSpec.containers (tag 2) > Container.name (tag 1): invalid UTF-8 in a string`.
#[derive(Clone, PartialEq, Eq)]
pub struct DecodeError(Box<Inner>);

#[derive(Clone, PartialEq, Eq)]
struct Inner {
    reason: String,
    /// Innermost first (pushed while the error travels outwards).
    path: Vec<(&'static str, &'static str, u32)>,
}

impl DecodeError {
    /// An error with no location yet.
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        Self(Box::new(Inner {
            reason: reason.into(),
            path: Vec::new(),
        }))
    }

    /// Adds the field it happened in (the error is travelling outwards).
    #[must_use]
    pub(crate) fn at(mut self, message: &'static str, field: &'static str, tag: u32) -> Self {
        self.0.path.push((message, field, tag));
        self
    }

    /// What went wrong, without where.
    pub fn reason(&self) -> &str {
        &self.0.reason
    }

    /// Where, outermost first: (message type, field, protobuf tag).
    pub fn path(&self) -> impl Iterator<Item = (&'static str, &'static str, u32)> + '_ {
        self.0.path.iter().rev().copied()
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (message, field, tag) in self.path() {
            if !first {
                f.write_str(" > ")?;
            }
            first = false;
            write!(f, "{message}.{field} (tag {tag})")?;
        }
        if !first {
            f.write_str(": ")?;
        }
        f.write_str(&self.0.reason)
    }
}

impl fmt::Debug for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DecodeError({self})")
    }
}

impl std::error::Error for DecodeError {}

/// A protobuf wire type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    Varint,
    Fixed64,
    Bytes,
    Fixed32,
}

impl Wire {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Wire::Varint => "varint",
            Wire::Fixed64 => "fixed64",
            Wire::Bytes => "length-delimited",
            Wire::Fixed32 => "fixed32",
        }
    }
}

/// A cursor over one message's bytes, knowing how deep it is.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    pub(crate) depth: u32,
    /// Where the last key read starts, and its length: a repeated field's next value has
    /// the same key bytes ([`Reader::run_length`]).
    key_at: usize,
    key_len: usize,
}

impl<'a> Reader<'a> {
    /// A reader of a message nested `depth` messages deep; fails past [`MAX_DEPTH`].
    pub(crate) fn new(buf: &'a [u8], depth: u32) -> Result<Self, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::new(format!(
                "messages nested more than {MAX_DEPTH} deep"
            )));
        }
        Ok(Self {
            buf,
            pos: 0,
            depth,
            key_at: 0,
            key_len: 0,
        })
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// A varint. Inlined with a fast path for one byte (every key of a field numbered up to
    /// 15, most lengths and small numbers): a Pod's decode reads a few hundred of them.
    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64, DecodeError> {
        if let Some(&byte) = self.buf.get(self.pos)
            && byte < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(byte));
        }
        self.varint_slow()
    }

    /// [`varint`](Self::varint) when its first byte is not the whole of it (read again from
    /// there), and its errors.
    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64, DecodeError> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err(DecodeError::new("truncated varint"));
            };
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err(DecodeError::new("varint longer than 64 bits"));
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(DecodeError::new("varint longer than 10 bytes"))
    }

    /// The next field's number and wire type; `None` at the end of the message. Inlined;
    /// what fails is built out of line.
    #[inline]
    pub(crate) fn key(&mut self) -> Result<Option<(u32, Wire)>, DecodeError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        self.key_at = self.pos;
        let key = self.varint()?;
        self.key_len = self.pos - self.key_at;
        let tag = key >> 3;
        let wire = match key & 7 {
            0 => Wire::Varint,
            1 => Wire::Fixed64,
            2 => Wire::Bytes,
            5 => Wire::Fixed32,
            _ => return Err(bad_key(key)),
        };
        if tag == 0 || tag > u64::from(u32::MAX >> 3) {
            return Err(bad_key(key));
        }
        #[allow(clippy::cast_possible_truncation)] // checked above
        Ok(Some((tag as u32, wire)))
    }

    /// A length-delimited field's bytes.
    #[inline]
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.varint()?;
        let left = self.buf.len() - self.pos;
        if len > left as u64 {
            return Err(past_the_end(len, left));
        }
        #[allow(clippy::cast_possible_truncation)] // at most `left`
        let end = self.pos + len as usize;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    pub(crate) fn fixed64(&mut self) -> Result<u64, DecodeError> {
        let end = self.pos + 8;
        let bytes = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| DecodeError::new("truncated fixed64"))?;
        self.pos = end;
        let mut array = [0; 8];
        array.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(array))
    }

    pub(crate) fn fixed32(&mut self) -> Result<u32, DecodeError> {
        let end = self.pos + 4;
        let bytes = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| DecodeError::new("truncated fixed32"))?;
        self.pos = end;
        let mut array = [0; 4];
        array.copy_from_slice(bytes);
        Ok(u32::from_le_bytes(array))
    }

    /// How many values of the field whose key was read last follow one another from here,
    /// this one included: gogo-protobuf writes a repeated field's values one after another,
    /// so a `Vec` can be sized once for all of them (exactly: what the cache stores then
    /// holds no spare capacity). Counted without decoding them, a length and a jump each;
    /// a value that does not parse ends the count (it fails where it is read).
    pub(crate) fn run_length(&self, wire: Wire) -> usize {
        let key = &self.buf[self.key_at..self.key_at + self.key_len];
        let mut probe = Reader {
            buf: self.buf,
            pos: self.pos,
            depth: self.depth,
            key_at: self.key_at,
            key_len: self.key_len,
        };
        let mut values = 0;
        while probe.skip(wire).is_ok() {
            values += 1;
            if key.is_empty() || !probe.buf[probe.pos..].starts_with(key) {
                break;
            }
            probe.pos += key.len();
        }
        values.max(1)
    }

    /// Skips a field this decoder does not know (a newer server's): forward compatibility.
    pub(crate) fn skip(&mut self, wire: Wire) -> Result<(), DecodeError> {
        match wire {
            Wire::Varint => self.varint().map(drop),
            Wire::Fixed64 => self.fixed64().map(drop),
            Wire::Bytes => self.bytes().map(drop),
            Wire::Fixed32 => self.fixed32().map(drop),
        }
    }

    /// Fails unless `wire` is what the field needs.
    #[inline]
    pub(crate) fn expect(wire: Wire, needed: Wire) -> Result<(), DecodeError> {
        if wire == needed {
            Ok(())
        } else {
            Err(wrong_wire(wire, needed))
        }
    }
}

/// Why a key (a varint already read) is not a field's: its number is 0 or past 2^29 - 1, or
/// its wire type is a group's (3, 4, never used by Kubernetes) or not one at all (6, 7).
#[cold]
#[inline(never)]
fn bad_key(key: u64) -> DecodeError {
    let tag = key >> 3;
    match key & 7 {
        _ if tag == 0 || tag > u64::from(u32::MAX >> 3) => {
            DecodeError::new(format!("invalid field number {tag}"))
        }
        3 | 4 => DecodeError::new(format!(
            "field {tag}: groups (wire types 3 and 4) are not used by Kubernetes"
        )),
        other => DecodeError::new(format!("field {tag}: invalid wire type {other}")),
    }
}

#[cold]
#[inline(never)]
fn past_the_end(len: u64, left: usize) -> DecodeError {
    DecodeError::new(format!(
        "length {len} runs past the end of the message ({left} bytes left)"
    ))
}

#[cold]
#[inline(never)]
fn wrong_wire(wire: Wire, needed: Wire) -> DecodeError {
    DecodeError::new(format!(
        "wire type {} where {} was expected",
        wire.name(),
        needed.name()
    ))
}

/// A length-delimited field's bytes as UTF-8.
#[inline]
pub(crate) fn utf8(bytes: &[u8]) -> Result<&str, DecodeError> {
    std::str::from_utf8(bytes)
        .map_err(|e| DecodeError::new(format!("invalid UTF-8 in a string ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(bytes: &[u8]) -> Result<u64, DecodeError> {
        Reader::new(bytes, 0).unwrap().varint()
    }

    #[test]
    fn reads_varints() {
        assert_eq!(varint(&[0]).unwrap(), 0);
        assert_eq!(varint(&[1]).unwrap(), 1);
        assert_eq!(varint(&[0xac, 0x02]).unwrap(), 300);
        // -1 as an int32 or int64: ten bytes.
        let minus_one = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(varint(&minus_one).unwrap() as i64, -1);
        assert_eq!(varint(&minus_one).unwrap() as i32, -1);
    }

    #[test]
    fn refuses_bad_varints() {
        assert_eq!(varint(&[]).unwrap_err().reason(), "truncated varint");
        assert_eq!(
            varint(&[0x80, 0x80]).unwrap_err().reason(),
            "truncated varint"
        );
        let too_long = [0xff; 11];
        assert!(varint(&too_long).is_err());
        let overflow = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(varint(&overflow).is_err());
    }

    #[test]
    fn refuses_lengths_past_the_end_and_bad_wire_types() {
        let mut r = Reader::new(&[0x0a, 0x05, b'a'], 0).unwrap();
        assert_eq!(r.key().unwrap(), Some((1, Wire::Bytes)));
        let error = r.bytes().unwrap_err();
        assert!(error.reason().contains("past the end"), "{error}");
        let mut r = Reader::new(&[0x0b], 0).unwrap();
        assert!(r.key().unwrap_err().reason().contains("groups"));
        let mut r = Reader::new(&[0x0e], 0).unwrap();
        assert!(r.key().unwrap_err().reason().contains("invalid wire type"));
        let mut r = Reader::new(&[0x00], 0).unwrap();
        assert!(r.key().unwrap_err().reason().contains("field number 0"));
        // The number is checked before the wire type, as the message says.
        let mut r = Reader::new(&[0x03], 0).unwrap();
        assert!(r.key().unwrap_err().reason().contains("field number 0"));
        // Past 2^29 - 1 (a five-byte key).
        let mut r = Reader::new(&[0x80, 0x80, 0x80, 0x80, 0x10], 0).unwrap();
        let error = r.key().unwrap_err();
        assert!(error.reason().contains("field number 536870912"), "{error}");
        // Keys of more than one byte (fields from 16 on) read through the slow path.
        let mut r = Reader::new(&[0x82, 0x01, 0x00, 0xf8, 0xff, 0xff, 0xff, 0x0f], 0).unwrap();
        assert_eq!(r.key().unwrap(), Some((16, Wire::Bytes)));
        assert_eq!(r.bytes().unwrap(), b"");
        assert_eq!(r.key().unwrap(), Some(((1 << 29) - 1, Wire::Varint)));
        assert_eq!(r.key().unwrap(), None);
        let error = Reader::expect(Wire::Varint, Wire::Bytes).unwrap_err();
        assert_eq!(
            error.reason(),
            "wire type varint where length-delimited was expected"
        );
        assert!(Reader::new(&[], MAX_DEPTH + 1).is_err());
    }

    #[test]
    fn says_where() {
        let error = DecodeError::new("invalid UTF-8 in a string")
            .at("Container", "name", 1)
            .at("PodSpec", "containers", 2)
            .at("Pod", "spec", 2);
        assert_eq!(
            error.to_string(),
            "Pod.spec (tag 2) > PodSpec.containers (tag 2) > Container.name (tag 1): invalid \
             UTF-8 in a string"
        );
    }
}
