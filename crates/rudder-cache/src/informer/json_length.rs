//! The length of a value's JSON, as `serde_json::to_vec` would write it, counted by a serde
//! `Serializer` that adds lengths and writes nothing.
//!
//! The informer keeps [`InformerStats::bytes_held`](super::InformerStats::bytes_held), the sum
//! of its objects' sizes as JSON, and measures every object it stores and every one it drops.
//! serde_json's own serializer run into a byte counter gives the same number with more work
//! (each string passed through its escaping writer a run at a time, each number formatted;
//! 0.6x the instructions here for a ConfigMap, `docs/benchmarks.md`). This serializer:
//!
//! - a string is its byte length, two quotes, and what its escapes add, found by asking a
//!   block of bytes at a time (64 in vector instructions, then 8) whether it holds a quote,
//!   a backslash or a control byte (a block without one adds nothing);
//! - an integer is its digit count (a logarithm, no formatting) and its sign;
//! - a float is formatted by `zmij`, the shortest-form formatter serde_json itself uses, into
//!   a stack buffer: floats are rare in Kubernetes objects and their length has no shortcut
//!   that stays exact; non-finite floats are `null`, as serde_json writes them;
//! - arrays and objects are their brackets, separators and members.
//!
//! Why not count what was decoded instead (the protobuf message's or the JSON's length): the
//! number would change with the wire format (a ConfigMap is about two thirds as long in
//! protobuf) and would not see a transform, which changes what is stored; the informer
//! promises the stored objects' length as JSON, the same whichever way they came.
//!
//! What a type's `Serialize` does before handing serde a value cannot be made cheaper from here,
//! with one exception: k8s-openapi formats each `Time` and `MicroTime` into a `String` with jiff
//! (about 2,000 instructions and an allocation each, a third of what counting a Pod cost), and their JSON has
//! the same length for every year from 0 to 9999 (`"2026-12-07T06:34:02Z"`, 22 bytes with its
//! quotes; `"2026-12-07T06:34:02.123456Z"`, 29), so a value of either type is counted at that width
//! without being formatted (recognised by its type's name). The only values that would be longer
//! are years before -999 (jiff writes the sign within the year's four characters until then), which
//! the API server cannot write as JSON (Go's encoder refuses years outside 0-9999) and which are
//! therefore counted one byte short. `ByteString`s are still base64-encoded to be counted.
//!
//! The result is serde_json's length byte for byte (but for the years above; compact form,
//! serde_json's escapes: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t` and `\u00XX` for the other
//! control bytes; nothing else escaped), including serde_json's `RawValue` (and the
//! `arbitrary_precision` feature's numbers), written verbatim. Where serde_json fails (a map key
//! that is not a string, a number or a bool; a non-finite float as a key; a `Serialize` impl's own
//! error), this fails at the same point, and [`json_length`] returns what was counted before it, as
//! serde_json would have written it. The unit tests below compare both on Kubernetes objects.

use std::fmt::{self, Display};

use serde::ser::{self, Impossible, Serialize};

/// The length of `value` serialized by `serde_json::to_vec`; on a serialization error, the
/// length of what serde_json would have written before it.
pub(crate) fn json_length<T: ?Sized + Serialize>(value: &T) -> usize {
    let mut length = Length(0);
    // A failure leaves what was counted before it, as serde_json's writer would hold it.
    let _ = length.value(value);
    length.0
}

/// The running count: `&mut Length` is the serializer.
struct Length(usize);

impl Length {
    /// Counts `value`: a k8s-openapi timestamp at its fixed width, anything else through its
    /// `Serialize`.
    #[inline]
    fn value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failed> {
        match fixed_width::<T>() {
            Some(width) => {
                self.0 += width;
                Ok(())
            }
            None => value.serialize(self),
        }
    }
}

/// The length of every value of `T` as JSON, quotes included, for k8s-openapi's `Time`
/// (`%Y-%m-%dT%H:%M:%SZ`) and `MicroTime` (`%Y-%m-%dT%H:%M:%S%.6fZ`), whose `Serialize`
/// formats into a new `String` first; `None` for any other type. The names compared are
/// both the compiler's, constant strings of each instantiation (a length and at most a short
/// memory comparison; not measured apart, the accounting as a whole is in
/// docs/benchmarks.md). A type this misses (a wrapper of the caller's) is only counted the
/// slow way.
#[inline]
fn fixed_width<T: ?Sized>() -> Option<usize> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
    use std::any::type_name;
    // Behind a reference too: serde hands a list's elements and a map's values over as
    // `&T`.
    let name = type_name::<T>();
    if name == type_name::<Time>() || name == type_name::<&Time>() {
        Some("\"0000-00-00T00:00:00Z\"".len())
    } else if name == type_name::<MicroTime>() || name == type_name::<&MicroTime>() {
        Some("\"0000-00-00T00:00:00.000000Z\"".len())
    } else {
        None
    }
}

/// A serialization error, from a `Serialize` impl or a map key JSON cannot have. Its message
/// is dropped: the count ignores it, and keeping it would allocate.
#[derive(Debug)]
struct Failed;

impl Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the value cannot be serialized as JSON")
    }
}

impl std::error::Error for Failed {}

impl ser::Error for Failed {
    fn custom<T: Display>(_msg: T) -> Self {
        Failed
    }
}

/// serde_json's names for its `RawValue` and, with its `arbitrary_precision` feature, its
/// `Number`: a struct of that name holds one field of that name, a string written verbatim.
const RAW_VALUE: &str = "$serde_json::private::RawValue";
const NUMBER: &str = "$serde_json::private::Number";

/// What each byte adds to a string's length when serde_json escapes it: 1 for `"`, `\` and
/// the control bytes with a short escape (`\b`, `\t`, `\n`, `\f`, `\r`), 5 for the other
/// control bytes (`\u00XX`), 0 for every other byte.
static ESCAPE_EXTRA: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = 5;
        byte += 1;
    }
    table[0x08] = 1;
    table[0x09] = 1;
    table[0x0a] = 1;
    table[0x0c] = 1;
    table[0x0d] = 1;
    table[b'"' as usize] = 1;
    table[b'\\' as usize] = 1;
    table
};

/// The length of `s`'s escaped contents, without quotes. Inlined, so that a struct's field
/// names, which are constants, are counted at compile time.
///
/// Whole 64-byte blocks are each asked first whether any byte of theirs is escaped at all,
/// a test the compiler turns into a few vector instructions per 16 bytes, and only a block
/// that has one is counted byte by byte (a 400-byte value costs about 400 instructions
/// this way, against about 1,050 eight bytes at a time); what is left, and every shorter
/// string, is looked at eight bytes at a time.
#[inline(always)]
fn escaped_length(s: &str) -> usize {
    let bytes = s.as_bytes();
    let (blocks, rest) = bytes.as_chunks::<64>();
    let mut extra = if blocks.is_empty() {
        0
    } else {
        blocks_extra(blocks)
    };
    let (words, rest) = rest.as_chunks::<8>();
    for word in words {
        if needs_escape(u64::from_ne_bytes(*word)) {
            extra += extra_of(word);
        }
    }
    bytes.len() + extra + extra_of(rest)
}

/// What escaping adds to whole 64-byte blocks. Out of line: only long strings come here.
#[inline(never)]
fn blocks_extra(blocks: &[[u8; 64]]) -> usize {
    let mut extra = 0;
    for block in blocks {
        // One bitwise OR over the block, with no branch per byte, so that it vectorizes.
        let any = block.iter().fold(0, |any, &b| {
            any | u8::from(b < 0x20) | u8::from(b == b'"') | u8::from(b == b'\\')
        });
        if any != 0 {
            extra += extra_of(block);
        }
    }
    extra
}

/// Whether any of the eight bytes in `word` is a quote, a backslash or a control byte; exact
/// as a yes or no, and without a branch per byte.
#[inline]
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // A byte below `n` sets its high bit in `(x - n) & !x` (for `n` at most 0x80); a byte
    // equal to `c` is a byte of `x ^ c` below 1.
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & HIGHS != 0
}

/// What escaping adds to `bytes`, byte by byte.
#[inline]
fn extra_of(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .map(|&b| usize::from(ESCAPE_EXTRA[usize::from(b)]))
        .sum()
}

/// The length of a JSON string: quotes and escaped contents.
#[inline(always)]
fn string_length(s: &str) -> usize {
    escaped_length(s) + 2
}

fn u64_length(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

fn i64_length(n: i64) -> usize {
    usize::from(n < 0) + u64_length(n.unsigned_abs())
}

fn u128_length(n: u128) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

fn i128_length(n: i128) -> usize {
    usize::from(n < 0) + u128_length(n.unsigned_abs())
}

fn f64_length(n: f64) -> usize {
    if n.is_finite() {
        zmij::Buffer::new().format_finite(n).len()
    } else {
        "null".len()
    }
}

fn f32_length(n: f32) -> usize {
    if n.is_finite() {
        zmij::Buffer::new().format_finite(n).len()
    } else {
        "null".len()
    }
}

/// Counts what `Display` writes, escaped (for `collect_str`).
struct EscapedWriter<'a>(&'a mut usize);

impl fmt::Write for EscapedWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        *self.0 += escaped_length(s);
        Ok(())
    }
}

impl<'a> ser::Serializer for &'a mut Length {
    type Ok = ();
    type Error = Failed;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Failed> {
        self.0 += if v { 4 } else { 5 };
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result<(), Failed> {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i16(self, v: i16) -> Result<(), Failed> {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i32(self, v: i32) -> Result<(), Failed> {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i64(self, v: i64) -> Result<(), Failed> {
        self.0 += i64_length(v);
        Ok(())
    }

    fn serialize_i128(self, v: i128) -> Result<(), Failed> {
        self.0 += i128_length(v);
        Ok(())
    }

    fn serialize_u8(self, v: u8) -> Result<(), Failed> {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u16(self, v: u16) -> Result<(), Failed> {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u32(self, v: u32) -> Result<(), Failed> {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u64(self, v: u64) -> Result<(), Failed> {
        self.0 += u64_length(v);
        Ok(())
    }

    fn serialize_u128(self, v: u128) -> Result<(), Failed> {
        self.0 += u128_length(v);
        Ok(())
    }

    fn serialize_f32(self, v: f32) -> Result<(), Failed> {
        self.0 += f32_length(v);
        Ok(())
    }

    fn serialize_f64(self, v: f64) -> Result<(), Failed> {
        self.0 += f64_length(v);
        Ok(())
    }

    fn serialize_char(self, v: char) -> Result<(), Failed> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }

    fn serialize_str(self, v: &str) -> Result<(), Failed> {
        self.0 += string_length(v);
        Ok(())
    }

    /// serde_json writes bytes as an array of numbers.
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Failed> {
        let digits: usize = v.iter().map(|&b| u64_length(u64::from(b))).sum();
        self.0 += 2 + digits + v.len().saturating_sub(1);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), Failed> {
        self.serialize_unit()
    }

    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Failed> {
        self.value(value)
    }

    fn serialize_unit(self) -> Result<(), Failed> {
        self.0 += "null".len();
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Failed> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Failed> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Failed> {
        self.value(value)
    }

    /// `{"variant":value}`.
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Failed> {
        self.0 += 1 + string_length(variant) + 1;
        self.value(value)?;
        self.0 += 1;
        Ok(())
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'a>, Failed> {
        Ok(Compound::open(self, len))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'a>, Failed> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, Failed> {
        self.serialize_seq(Some(len))
    }

    /// `{"variant":[...]}`.
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, Failed> {
        self.0 += 1 + string_length(variant) + 1;
        Ok(Compound::open_variant(self, Some(len)))
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a>, Failed> {
        Ok(Compound::open(self, len))
    }

    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Compound<'a>, Failed> {
        if name == RAW_VALUE || name == NUMBER {
            return Ok(Compound::Verbatim(self));
        }
        self.serialize_map(Some(len))
    }

    /// `{"variant":{...}}`.
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, Failed> {
        self.0 += 1 + string_length(variant) + 1;
        Ok(Compound::open_variant(self, Some(len)))
    }

    /// Counted as it is written, without the `String` serde's default would build.
    fn collect_str<T: ?Sized + Display>(self, value: &T) -> Result<(), Failed> {
        use fmt::Write as _;
        let mut contents = 0;
        // Counting never fails; a `Display` impl that does leaves serde_json's output short.
        let result = write!(EscapedWriter(&mut contents), "{value}");
        self.0 += 1 + contents;
        result.map_err(|_| Failed)?;
        self.0 += 1;
        Ok(())
    }
}

/// An array or object being counted (or a verbatim string, see [`RAW_VALUE`]).
enum Compound<'a> {
    Members {
        length: &'a mut Length,
        state: State,
        /// Inside a `{"variant":...}` wrapper, which adds its closing brace at the end.
        variant: bool,
    },
    Verbatim(&'a mut Length),
}

/// Where an array or object is, as serde_json tracks it: its separators and closing bracket
/// follow from it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Known empty when opened: both brackets written then, nothing at the end.
    Empty,
    /// No member yet.
    First,
    /// A member written: the next one needs a comma.
    Rest,
}

impl<'a> Compound<'a> {
    /// Opens an array or object: its opening bracket, or both if it is known to be empty.
    fn open(length: &'a mut Length, len: Option<usize>) -> Self {
        let state = if len == Some(0) {
            length.0 += 2;
            State::Empty
        } else {
            length.0 += 1;
            State::First
        };
        Compound::Members {
            length,
            state,
            variant: false,
        }
    }

    fn open_variant(length: &'a mut Length, len: Option<usize>) -> Self {
        let mut compound = Self::open(length, len);
        if let Compound::Members { variant, .. } = &mut compound {
            *variant = true;
        }
        compound
    }

    /// The separator before a member (none before the first).
    fn next(&mut self) -> Result<&mut Length, Failed> {
        match self {
            Compound::Members { length, state, .. } => {
                if *state != State::First {
                    length.0 += 1;
                }
                *state = State::Rest;
                Ok(&mut **length)
            }
            Compound::Verbatim(_) => Err(Failed),
        }
    }

    fn element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failed> {
        self.next()?.value(value)
    }

    /// The closing bracket (unless written at the opening) and a variant's closing brace.
    fn close(self) -> Result<(), Failed> {
        if let Compound::Members {
            length,
            state,
            variant,
        } = self
        {
            length.0 += usize::from(state != State::Empty) + usize::from(variant);
        }
        Ok(())
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = Failed;

    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failed> {
        self.element(value)
    }

    fn end(self) -> Result<(), Failed> {
        self.close()
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = Failed;

    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failed> {
        self.element(value)
    }

    fn end(self) -> Result<(), Failed> {
        self.close()
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = Failed;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failed> {
        self.element(value)
    }

    fn end(self) -> Result<(), Failed> {
        self.close()
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = Failed;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failed> {
        self.element(value)
    }

    fn end(self) -> Result<(), Failed> {
        self.close()
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Failed;

    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Failed> {
        key.serialize(MapKey(self.next()?))
    }

    /// The colon and the value.
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failed> {
        match self {
            Compound::Members { length, .. } => {
                length.0 += 1;
                length.value(value)
            }
            Compound::Verbatim(_) => Err(Failed),
        }
    }

    fn end(self) -> Result<(), Failed> {
        self.close()
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = Failed;

    // Inlined into each type's `serialize`, where `key` is a constant and its length is
    // counted at compile time.
    #[inline]
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Failed> {
        match self {
            Compound::Verbatim(length) if key == RAW_VALUE || key == NUMBER => {
                value.serialize(VerbatimStr(length))
            }
            Compound::Verbatim(_) => Err(Failed),
            Compound::Members { .. } => {
                let length = self.next()?;
                length.0 += string_length(key) + 1;
                length.value(value)
            }
        }
    }

    fn end(self) -> Result<(), Failed> {
        self.close()
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = Failed;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Failed> {
        ser::SerializeStruct::serialize_field(self, key, value)
    }

    fn end(self) -> Result<(), Failed> {
        self.close()
    }
}

/// A map key: JSON has only string keys, and serde_json quotes numbers and bools to make
/// them; anything else fails.
struct MapKey<'a>(&'a mut Length);

impl MapKey<'_> {
    /// A key written as `"<digits>"`: the digits and two quotes.
    fn quoted(self, inner: usize) -> Result<(), Failed> {
        self.0.0 += inner + 2;
        Ok(())
    }
}

impl ser::Serializer for MapKey<'_> {
    type Ok = ();
    type Error = Failed;
    type SerializeSeq = Impossible<(), Failed>;
    type SerializeTuple = Impossible<(), Failed>;
    type SerializeTupleStruct = Impossible<(), Failed>;
    type SerializeTupleVariant = Impossible<(), Failed>;
    type SerializeMap = Impossible<(), Failed>;
    type SerializeStruct = Impossible<(), Failed>;
    type SerializeStructVariant = Impossible<(), Failed>;

    fn serialize_bool(self, v: bool) -> Result<(), Failed> {
        self.quoted(if v { 4 } else { 5 })
    }

    fn serialize_i8(self, v: i8) -> Result<(), Failed> {
        self.quoted(i64_length(i64::from(v)))
    }

    fn serialize_i16(self, v: i16) -> Result<(), Failed> {
        self.quoted(i64_length(i64::from(v)))
    }

    fn serialize_i32(self, v: i32) -> Result<(), Failed> {
        self.quoted(i64_length(i64::from(v)))
    }

    fn serialize_i64(self, v: i64) -> Result<(), Failed> {
        self.quoted(i64_length(v))
    }

    fn serialize_i128(self, v: i128) -> Result<(), Failed> {
        self.quoted(i128_length(v))
    }

    fn serialize_u8(self, v: u8) -> Result<(), Failed> {
        self.quoted(u64_length(u64::from(v)))
    }

    fn serialize_u16(self, v: u16) -> Result<(), Failed> {
        self.quoted(u64_length(u64::from(v)))
    }

    fn serialize_u32(self, v: u32) -> Result<(), Failed> {
        self.quoted(u64_length(u64::from(v)))
    }

    fn serialize_u64(self, v: u64) -> Result<(), Failed> {
        self.quoted(u64_length(v))
    }

    fn serialize_u128(self, v: u128) -> Result<(), Failed> {
        self.quoted(u128_length(v))
    }

    fn serialize_f32(self, v: f32) -> Result<(), Failed> {
        if !v.is_finite() {
            return Err(Failed);
        }
        self.quoted(f32_length(v))
    }

    fn serialize_f64(self, v: f64) -> Result<(), Failed> {
        if !v.is_finite() {
            return Err(Failed);
        }
        self.quoted(f64_length(v))
    }

    fn serialize_char(self, v: char) -> Result<(), Failed> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }

    fn serialize_str(self, v: &str) -> Result<(), Failed> {
        self.0.0 += string_length(v);
        Ok(())
    }

    fn serialize_bytes(self, _v: &[u8]) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_none(self) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Failed> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Failed> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Failed> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Failed> {
        Err(Failed)
    }

    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Failed> {
        Err(Failed)
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, Failed> {
        Err(Failed)
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Failed> {
        Err(Failed)
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Failed> {
        Err(Failed)
    }

    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, Failed> {
        Err(Failed)
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Failed> {
        Err(Failed)
    }

    fn collect_str<T: ?Sized + Display>(self, value: &T) -> Result<(), Failed> {
        self.0.collect_str(value)
    }
}

/// The string inside serde_json's `RawValue` (or `arbitrary_precision` number): written as
/// it is, unquoted and unescaped.
struct VerbatimStr<'a>(&'a mut Length);

impl ser::Serializer for VerbatimStr<'_> {
    type Ok = ();
    type Error = Failed;
    type SerializeSeq = Impossible<(), Failed>;
    type SerializeTuple = Impossible<(), Failed>;
    type SerializeTupleStruct = Impossible<(), Failed>;
    type SerializeTupleVariant = Impossible<(), Failed>;
    type SerializeMap = Impossible<(), Failed>;
    type SerializeStruct = Impossible<(), Failed>;
    type SerializeStructVariant = Impossible<(), Failed>;

    fn serialize_str(self, v: &str) -> Result<(), Failed> {
        self.0.0 += v.len();
        Ok(())
    }

    fn serialize_bool(self, _v: bool) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_i8(self, _v: i8) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_i16(self, _v: i16) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_i32(self, _v: i32) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_i64(self, _v: i64) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_u8(self, _v: u8) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_u16(self, _v: u16) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_u32(self, _v: u32) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_u64(self, _v: u64) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_f32(self, _v: f32) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_f64(self, _v: f64) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_char(self, _v: char) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_bytes(self, _v: &[u8]) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_none(self) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_some<T: ?Sized + Serialize>(self, _value: &T) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_unit(self) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
    ) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _value: &T,
    ) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), Failed> {
        Err(Failed)
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Failed> {
        Err(Failed)
    }

    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Failed> {
        Err(Failed)
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, Failed> {
        Err(Failed)
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Failed> {
        Err(Failed)
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Failed> {
        Err(Failed)
    }

    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, Failed> {
        Err(Failed)
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Failed> {
        Err(Failed)
    }

    fn collect_str<T: ?Sized + Display>(self, _value: &T) -> Result<(), Failed> {
        Err(Failed)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
    use kube::api::DynamicObject;
    use serde::Serialize;
    use serde_json::json;

    use super::json_length;

    /// What serde_json writes for `value` (up to its error, if it fails).
    fn serde_json_length<T: ?Sized + Serialize>(value: &T) -> usize {
        struct Counter(usize);
        impl std::io::Write for Counter {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0 += buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut counter = Counter(0);
        let _ = serde_json::to_writer(&mut counter, value);
        counter.0
    }

    #[track_caller]
    fn same<T: ?Sized + Serialize>(value: &T) -> usize {
        let expected = serde_json_length(value);
        assert_eq!(json_length(value), expected);
        expected
    }

    /// A Pod as the API server returns one that is scheduled and running: two containers
    /// with env, ports, probes, resources and mounts, a status with conditions and container
    /// statuses, and the managedFields of its two writers.
    fn running_pod() -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-7d4b9c-x2x8q",
                "generateName": "web-7d4b9c-",
                "namespace": "shop",
                "uid": "ab8e468e-cad5-4443-b03a-8b54435b4aed",
                "resourceVersion": "91823",
                "creationTimestamp": "2026-12-06T20:58:09Z",
                "labels": {"app": "web", "pod-template-hash": "7d4b9c"},
                "annotations": {
                    "kubectl.kubernetes.io/restartedAt": "2026-12-06T20:50:00Z",
                    "note": "line one\nline two\t\"quoted\" \\ back \u{1} ctl ünï©ødé 🚀"
                },
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c",
                    "uid": "0b5e1f8a-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
                    "controller": true, "blockOwnerDeletion": true
                }],
                "managedFields": [
                    {
                        "manager": "kube-controller-manager", "operation": "Update",
                        "apiVersion": "v1", "time": "2026-12-06T20:58:09Z",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}},
                            "f:ownerReferences": {".": {}, "k:{\"uid\":\"0b5e1f8a\"}": {}}},
                            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}}}}}
                    },
                    {
                        "manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                        "time": "2026-12-06T20:58:11Z", "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:status": {"f:conditions": {}}}, "subresource": "status"
                    }
                ]
            },
            "spec": {
                "nodeName": "kwok-node-0",
                "serviceAccountName": "default",
                "terminationGracePeriodSeconds": 30,
                "containers": [
                    {
                        "name": "app",
                        "image": "registry.example.com/shop/web:1.4.2",
                        "args": ["--port=8080", "--log-level=debug"],
                        "env": [
                            {"name": "MODE", "value": "production"},
                            {"name": "EMPTY", "value": ""},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}
                        ],
                        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                        "resources": {
                            "requests": {"cpu": "250m", "memory": "128Mi"},
                            "limits": {"cpu": "1", "memory": "512Mi"}
                        },
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                            "initialDelaySeconds": 5, "periodSeconds": 10, "timeoutSeconds": 1,
                            "successThreshold": 1, "failureThreshold": 3},
                        "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5},
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/web", "readOnly": true}]
                    },
                    {
                        "name": "sidecar",
                        "image": "registry.example.com/proxy:2.0",
                        "ports": [{"containerPort": 15001}],
                        "resources": {"requests": {"cpu": "0.1", "memory": "64Mi"}}
                    }
                ],
                "volumes": [{"name": "config", "configMap": {"name": "web-config", "defaultMode": 420}}],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300}]
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": "2026-12-06T20:58:10Z"},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-12-06T20:58:09Z"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-06T20:58:11Z"},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-12-06T20:58:11Z"},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-06T20:58:09Z"}
                ],
                "hostIP": "10.0.0.7", "hostIPs": [{"ip": "10.0.0.7"}],
                "podIP": "10.244.1.12", "podIPs": [{"ip": "10.244.1.12"}, {"ip": "fd00::c"}],
                "startTime": "2026-12-06T20:58:09Z",
                "qosClass": "Burstable",
                "containerStatuses": [
                    {"name": "app", "ready": true, "restartCount": 0, "started": true,
                     "image": "registry.example.com/shop/web:1.4.2", "imageID": "sha256:0123abcd",
                     "containerID": "containerd://5f3a", "state": {"running": {"startedAt": "2026-12-06T20:58:10Z"}}},
                    {"name": "sidecar", "ready": true, "restartCount": 2, "started": true,
                     "image": "registry.example.com/proxy:2.0", "imageID": "sha256:4567ef",
                     "lastState": {"terminated": {"exitCode": -1, "reason": "Error", "startedAt": "2026-12-06T20:58:09Z", "finishedAt": "2026-12-06T20:58:10Z"}},
                     "state": {"running": {"startedAt": "2026-12-06T20:58:10Z"}}}
                ]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_running_pod_counts_as_serde_json_writes_it() {
        assert!(same(&running_pod()) > 3000);
        // Behind a pointer, as the store holds it.
        same(&Box::new(running_pod()));
    }

    #[test]
    fn timestamps_count_at_their_width_as_serde_json_writes_them() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
            Condition, MicroTime, ObjectMeta, Time,
        };
        use k8s_openapi::jiff::Timestamp;
        // The epoch, Go's zero time (year 1), a time with nanoseconds, the last instant jiff
        // holds (in year 9999), and years 0 and 999 (zero-padded).
        let instants = [
            Timestamp::UNIX_EPOCH,
            Timestamp::new(-62_135_596_800, 0).unwrap(),
            Timestamp::new(1_796_625_440, 123_456_789).unwrap(),
            Timestamp::MAX,
            "0000-03-01T00:00:00Z".parse().unwrap(),
            "0999-12-31T23:59:59.5Z".parse().unwrap(),
        ];
        for at in instants {
            // Alone, as a field, in an `Option`, in a list and as a map value.
            assert_eq!(same(&Time(at)), 22, "{at}");
            assert_eq!(same(&MicroTime(at)), 29, "{at}");
            same(&Some(Time(at)));
            same(&vec![Time(at), Time(at)]);
            same(&BTreeMap::from([("at", MicroTime(at))]));
            same(&ObjectMeta {
                creation_timestamp: Some(Time(at)),
                deletion_timestamp: Some(Time(at)),
                ..ObjectMeta::default()
            });
            same(&Condition {
                last_transition_time: Time(at),
                message: "m".into(),
                reason: "R".into(),
                status: "True".into(),
                type_: "Ready".into(),
                observed_generation: None,
            });
        }
        // Years before 0 (which the API server cannot write as JSON): jiff pads the year
        // to four characters with its sign, so years -1 to -999 are the same width, and a
        // year before -999 one byte longer than it is counted, as the module says.
        let year_minus_1 = Timestamp::new(-62_198_755_200 + 150 * 86_400, 0).unwrap();
        same(&Time(year_minus_1));
        same(&MicroTime(year_minus_1));
        let year_minus_2000 = Timestamp::new(-125_281_123_200, 0).unwrap();
        for at in [year_minus_2000, Timestamp::MIN] {
            let written = serde_json::to_vec(&Time(at)).unwrap();
            assert!(
                written.starts_with(b"\"-"),
                "{}",
                String::from_utf8_lossy(&written)
            );
            // One byte short for each such timestamp, in every place a value can be: which
            // shows that each of these paths counts it at its width, unformatted.
            let short = |value: &dyn erased::Counted, timestamps: usize| {
                assert_eq!(value.serde_json() - value.counted(), timestamps);
            };
            short(&Time(at), 1);
            short(&MicroTime(at), 1);
            short(&Some(Time(at)), 1);
            short(&vec![Time(at), Time(at)], 2);
            short(&(Time(at), MicroTime(at)), 2);
            short(
                &BTreeMap::from([("a", MicroTime(at)), ("b", MicroTime(at))]),
                2,
            );
            short(&Wrapped(Time(at)), 1);
            short(&Variant::Of(MicroTime(at)), 1);
            short(
                &ObjectMeta {
                    creation_timestamp: Some(Time(at)),
                    deletion_timestamp: Some(Time(at)),
                    ..ObjectMeta::default()
                },
                2,
            );
            short(&Box::new(Some(Time(at))), 1);
        }
    }

    /// A newtype struct and a newtype variant around a timestamp.
    #[derive(Serialize)]
    struct Wrapped<T>(T);

    #[derive(Serialize)]
    enum Variant<T> {
        Of(T),
    }

    /// Both counts of a value (serde_json's through the module's one counter) behind one
    /// object-safe trait, so that values of different types go through one helper.
    mod erased {
        use serde::Serialize;

        pub(super) trait Counted {
            fn serde_json(&self) -> usize;
            fn counted(&self) -> usize;
        }

        impl<T: Serialize> Counted for T {
            fn serde_json(&self) -> usize {
                super::serde_json_length(self)
            }
            fn counted(&self) -> usize {
                super::json_length(self)
            }
        }
    }

    #[test]
    fn config_maps_and_secrets_count_as_serde_json_writes_them() {
        let mut data = BTreeMap::new();
        data.insert("value".to_owned(), "v".repeat(400));
        data.insert(
            "app.properties".to_owned(),
            "a=1\nb=\"two\"\r\n\tc=\\3\u{7f}".to_owned(),
        );
        data.insert("ünï©ødé 🚀".to_owned(), "日本語のテキスト".to_owned());
        data.insert(String::new(), String::new());
        let binary: Vec<u8> = (0..=255).collect();
        let mut binary_data = BTreeMap::new();
        binary_data.insert("all-bytes".to_owned(), ByteString(binary));
        binary_data.insert("empty".to_owned(), ByteString(Vec::new()));
        let mut config_map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "web-config", "namespace": "shop", "resourceVersion": "7",
                "creationTimestamp": "2026-12-06T20:58:09Z", "labels": {}, "finalizers": []}
        }))
        .unwrap();
        config_map.data = Some(data.clone());
        config_map.binary_data = Some(binary_data.clone());
        config_map.immutable = Some(false);
        same(&config_map);
        same(&ConfigMap::default());

        let secret = Secret {
            data: Some(binary_data),
            string_data: Some(data),
            type_: Some("kubernetes.io/tls".to_owned()),
            ..Secret::default()
        };
        same(&secret);
    }

    #[test]
    fn every_escape_counts_at_every_offset() {
        // Each byte JSON may escape, and some it does not, at each place in a 64-byte block,
        // an 8-byte word and the tail after the last whole word.
        let specials: Vec<char> = (0u8..0x80)
            .map(char::from)
            .chain(['é', '€', '🚀', '\u{2028}', '\u{feff}'])
            .collect();
        for &c in &specials {
            for before in 0..100 {
                let s = format!("{}{c}{}", "a".repeat(before), "b".repeat(before % 19));
                same(&s);
                same(&c);
            }
        }
        let every_ascii: String = (0u8..0x80).map(char::from).collect();
        same(&every_ascii);
        same(&every_ascii.repeat(9));
    }

    #[test]
    fn floats_and_integers_in_a_custom_resource_count_as_serde_json_writes_them() {
        let mut object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"},
            "spec": {
                "ratio": 0.9564959075063557,
                "tiny": -8.010580466467539e-113,
                "subnormal": 5e-324,
                "huge": 1.7976931348623157e308,
                "negativeZero": -0.0,
                "whole": 1.0,
                "exponent": 1e21,
                "fraction": 0.000001,
                "ints": [0, -1, 9, 10, 99, 100, 9007199254740993u64, u64::MAX, i64::MIN],
                "nested": {"empty": {}, "list": [], "flags": [true, false, null]}
            }
        }))
        .unwrap();
        same(&object);
        // Shortest forms of many doubles, subnormals and large exponents among them.
        let mut bits = 0x9e37_79b9_7f4a_7c15_u64;
        let mut floats = Vec::new();
        for _ in 0..2000 {
            bits ^= bits << 13;
            bits ^= bits >> 7;
            bits ^= bits << 17;
            let f = f64::from_bits(bits);
            same(&f);
            same(&(f as f32));
            if f.is_finite() {
                floats.push(f);
            }
        }
        object.data["spec"]["floats"] = json!(floats);
        same(&object);
        for f in [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            0.1 + 0.2,
        ] {
            same(&f);
        }
        for n in [0u64, 1, 9, 10, 99, 100, 999_999, 1_000_000, u64::MAX] {
            same(&n);
            same(&(n as i64));
            same(&-(n as i128));
            same(&(u128::from(n) * u128::from(u64::MAX)));
        }
        same(&i64::MIN);
        same(&i128::MIN);
        same(&u128::MAX);
        same(&-7i8);
        same(&300u16);
    }

    #[test]
    fn every_serde_shape_counts_as_serde_json_writes_it() {
        #[derive(Serialize)]
        struct Unit;
        #[derive(Serialize)]
        struct Newtype(u8);
        #[derive(Serialize)]
        struct Tuple(u8, &'static str);
        #[derive(Serialize)]
        enum Shapes {
            Unit,
            Newtype(i32),
            Tuple(u8, String),
            EmptyTuple(),
            Struct { a: Option<u8>, b: Vec<u8> },
            EmptyStruct {},
        }
        #[derive(Serialize)]
        struct All {
            unit: (),
            unit_struct: Unit,
            newtype: Newtype,
            tuple: Tuple,
            empty_tuple: (),
            variants: Vec<Shapes>,
            none: Option<String>,
            bytes: serde_bytes_like::Bytes,
            #[serde(rename = "quoted \"key\"\n")]
            renamed: bool,
        }
        let all = All {
            unit: (),
            unit_struct: Unit,
            newtype: Newtype(7),
            tuple: Tuple(1, "two"),
            empty_tuple: (),
            variants: vec![
                Shapes::Unit,
                Shapes::Newtype(-12),
                Shapes::Tuple(3, "x\"y".to_owned()),
                Shapes::EmptyTuple(),
                Shapes::Struct {
                    a: None,
                    b: vec![1, 20, 255],
                },
                Shapes::EmptyStruct {},
            ],
            none: None,
            bytes: serde_bytes_like::Bytes(vec![0, 9, 10, 99, 100, 255]),
            renamed: true,
        };
        same(&all);
        same(&serde_bytes_like::Bytes(Vec::new()));

        // Keys serde_json quotes: numbers, bools, chars, unit variants.
        #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
        enum Key {
            Left,
        }
        same(&BTreeMap::from([(-5i32, 1), (12, 2)]));
        same(&BTreeMap::from([(u128::MAX, "x")]));
        same(&BTreeMap::from([(true, 1), (false, 2)]));
        same(&BTreeMap::from([('"', 1), ('é', 2)]));
        same(&BTreeMap::from([(Key::Left, ())]));
        // A map serialized through `collect_map` with float keys.
        struct FloatKeys;
        impl Serialize for FloatKeys {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_map([(0.25f64, 1), (1e300, 2)])
            }
        }
        same(&FloatKeys);
        // `collect_str` (what jiff's and many types' `Display`-based impls use).
        struct Shown;
        impl Serialize for Shown {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(&format_args!("a{}\"b\n{}", 1, "ü"))
            }
        }
        same(&Shown);
        same(&BTreeMap::from([("k", Shown)]));
        // serde_json's own raw JSON, written verbatim.
        let raw =
            serde_json::value::RawValue::from_string(r#"{ "a" : [1, 2.50] }"#.to_owned()).unwrap();
        same(&raw);
        same(&json!({"nested": [1, "two"]}));
    }

    #[test]
    fn a_value_serde_json_cannot_write_counts_what_it_writes_before_failing() {
        // Keys that are not strings, numbers or bools; a float key that is not finite.
        let tuple_keys = BTreeMap::from([((1u8, 2u8), "a")]);
        assert_eq!(same(&tuple_keys), 1);
        struct NanKey;
        impl Serialize for NanKey {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_map([(1.0f64, 1), (f64::NAN, 2)])
            }
        }
        same(&NanKey);
        // A `Serialize` impl's own error, after a member.
        struct Fails;
        impl Serialize for Fails {
            fn serialize<S: serde::Serializer>(&self, _s: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no"))
            }
        }
        #[derive(Serialize)]
        struct Half {
            first: u8,
            second: Fails,
        }
        assert_eq!(
            same(&Half {
                first: 1,
                second: Fails
            }),
            r#"{"first":1,"second":"#.len()
        );
    }

    /// Bytes serialized with `serialize_bytes` (serde's `Vec<u8>` is a sequence).
    mod serde_bytes_like {
        pub(super) struct Bytes(pub(super) Vec<u8>);
        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
    }
}
