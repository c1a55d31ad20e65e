//! How one field's value is read, and the helpers the generated decoders call for a field
//! of each shape (a scalar or message, `Option` or not, repeated, a map).
//!
//! Presence follows what Go's `encoding/json` writes for the same object, so that a decoded
//! object equals what serde_json makes of the server's JSON: gogo-protobuf writes every
//! non-pointer field, zero or not, while JSON leaves out a zero field tagged `omitempty`; so
//! a zero value of a non-pointer `omitempty` field becomes `None` (`omit_zero`), and a
//! pointer field on the wire is `Some` even when zero. A zero `Time` or `MicroTime` (an
//! empty message) is `None`, as JSON writes it `null`.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, MicroTime, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use crate::wire::{DecodeError, Reader, Wire, utf8};

/// One kind of value: its wire type, how it is read, and what its zero is.
pub(crate) trait Codec {
    /// The Rust value.
    type V;
    /// The wire type it is written with.
    const WIRE: Wire;
    /// Whether a repeated field of it may come packed (scalars).
    const PACKABLE: bool = false;
    /// Reads one value (the wire type checked). `None` is a value JSON writes as `null`.
    fn read(r: &mut Reader<'_>) -> Result<Option<Self::V>, DecodeError>;
    /// Whether JSON's `omitempty` leaves it out.
    fn is_zero(_: &Self::V) -> bool {
        false
    }
    /// The value of a map entry that has none on the wire (Go's zero value), where there is
    /// one.
    fn missing() -> Option<Self::V> {
        None
    }
    /// Reads one value into a field the Rust type requires (a `null` leaves it as it is).
    fn read_into(slot: &mut Self::V, r: &mut Reader<'_>) -> Result<(), DecodeError> {
        if let Some(v) = Self::read(r)? {
            *slot = v;
        }
        Ok(())
    }
    /// Reads one value into an `Option` field (`None` for a `null`, and for a zero that
    /// JSON's `omitempty` leaves out when `omit_zero`).
    fn read_into_opt(
        slot: &mut Option<Self::V>,
        r: &mut Reader<'_>,
        omit_zero: bool,
    ) -> Result<(), DecodeError> {
        *slot = match Self::read(r)? {
            Some(v) if omit_zero && Self::is_zero(&v) => None,
            v => v,
        };
        Ok(())
    }
    /// Reads one element of a repeated field onto its end.
    fn read_push(slot: &mut Vec<Self::V>, r: &mut Reader<'_>) -> Result<(), DecodeError> {
        slot.extend(Self::read(r)?);
        Ok(())
    }
}

pub(crate) struct Str;
impl Codec for Str {
    type V = String;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<String>, DecodeError> {
        Ok(Some(utf8(r.bytes()?)?.to_owned()))
    }
    fn is_zero(v: &String) -> bool {
        v.is_empty()
    }
    fn missing() -> Option<Self::V> {
        Some(Default::default())
    }
}

pub(crate) struct Bool;
impl Codec for Bool {
    type V = bool;
    const WIRE: Wire = Wire::Varint;
    const PACKABLE: bool = true;
    fn read(r: &mut Reader<'_>) -> Result<Option<bool>, DecodeError> {
        Ok(Some(r.varint()? != 0))
    }
    fn is_zero(v: &bool) -> bool {
        !v
    }
    fn missing() -> Option<Self::V> {
        Some(Default::default())
    }
}

pub(crate) struct I32;
impl Codec for I32 {
    type V = i32;
    const WIRE: Wire = Wire::Varint;
    const PACKABLE: bool = true;
    #[allow(clippy::cast_possible_truncation)] // an int32 on the wire is its int64's varint
    fn read(r: &mut Reader<'_>) -> Result<Option<i32>, DecodeError> {
        Ok(Some(r.varint()? as i32))
    }
    fn is_zero(v: &i32) -> bool {
        *v == 0
    }
    fn missing() -> Option<Self::V> {
        Some(Default::default())
    }
}

pub(crate) struct I64;
impl Codec for I64 {
    type V = i64;
    const WIRE: Wire = Wire::Varint;
    const PACKABLE: bool = true;
    #[allow(clippy::cast_possible_wrap)] // two's complement, as protobuf writes it
    fn read(r: &mut Reader<'_>) -> Result<Option<i64>, DecodeError> {
        Ok(Some(r.varint()? as i64))
    }
    fn is_zero(v: &i64) -> bool {
        *v == 0
    }
    fn missing() -> Option<Self::V> {
        Some(Default::default())
    }
}

pub(crate) struct F64;
impl Codec for F64 {
    type V = f64;
    const WIRE: Wire = Wire::Fixed64;
    const PACKABLE: bool = true;
    fn read(r: &mut Reader<'_>) -> Result<Option<f64>, DecodeError> {
        Ok(Some(f64::from_bits(r.fixed64()?)))
    }
    fn is_zero(v: &f64) -> bool {
        *v == 0.0
    }
    fn missing() -> Option<Self::V> {
        Some(Default::default())
    }
}

pub(crate) struct Bytes;
impl Codec for Bytes {
    type V = ByteString;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<ByteString>, DecodeError> {
        Ok(Some(ByteString(r.bytes()?.to_vec())))
    }
    fn is_zero(v: &ByteString) -> bool {
        v.0.is_empty()
    }
    fn missing() -> Option<Self::V> {
        Some(Default::default())
    }
}

/// What the generated code implements for every message: [`Message`] without its
/// `Default` bound (two of k8s-openapi's structs, with a required time, have none).
pub(crate) trait Decode: Sized {
    /// An empty value to merge into.
    fn fresh() -> Self;
    /// Reads `buf` into `self`, nested `depth` deep.
    fn merge_at(&mut self, buf: &[u8], depth: u32) -> Result<(), DecodeError>;
}

/// Any generated message.
pub(crate) struct Msg<M>(std::marker::PhantomData<M>);
impl<M: Decode> Codec for Msg<M> {
    type V = M;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<M>, DecodeError> {
        let bytes = r.bytes()?;
        let mut message = M::fresh();
        message.merge_at(bytes, r.depth + 1)?;
        Ok(Some(message))
    }
    fn missing() -> Option<Self::V> {
        Some(M::fresh())
    }
    // A message in a field is read in place, its fields straight into the one the field
    // holds (as protobuf merges a message that comes twice, and Go's decoder does),
    // rather than built elsewhere and moved in: a `PodSpec` is over a kilobyte. (A boxed
    // message, `Boxed<Msg<_>>` of a recursive schema, is still read whole and replaced.)
    fn read_into(slot: &mut M, r: &mut Reader<'_>) -> Result<(), DecodeError> {
        let bytes = r.bytes()?;
        slot.merge_at(bytes, r.depth + 1)
    }
    // A message is never a zero `omitempty` leaves out (an empty one is written `{}`).
    fn read_into_opt(
        slot: &mut Option<M>,
        r: &mut Reader<'_>,
        _omit_zero: bool,
    ) -> Result<(), DecodeError> {
        let bytes = r.bytes()?;
        slot.get_or_insert_with(M::fresh)
            .merge_at(bytes, r.depth + 1)
    }
    fn read_push(slot: &mut Vec<M>, r: &mut Reader<'_>) -> Result<(), DecodeError> {
        let bytes = r.bytes()?;
        slot.push(M::fresh());
        match slot.last_mut() {
            Some(message) => message.merge_at(bytes, r.depth + 1),
            None => Ok(()),
        }
    }
}

/// A value k8s-openapi boxes (a recursive schema's).
pub(crate) struct Boxed<C>(std::marker::PhantomData<C>);
impl<C: Codec> Codec for Boxed<C> {
    type V = Box<C::V>;
    const WIRE: Wire = C::WIRE;
    fn read(r: &mut Reader<'_>) -> Result<Option<Box<C::V>>, DecodeError> {
        Ok(C::read(r)?.map(Box::new))
    }
}

/// Reads a nested message's fields with `field`, which gets each tag, wire type and reader.
fn nested(
    r: &mut Reader<'_>,
    mut field: impl FnMut(u32, Wire, &mut Reader<'_>) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    let bytes = r.bytes()?;
    let mut inner = Reader::new(bytes, r.depth + 1)?;
    while let Some((tag, wire)) = inner.key()? {
        field(tag, wire, &mut inner)?;
    }
    Ok(())
}

/// k8s-openapi's type for a Go struct with no fields, `X(serde_json::Value)`.
pub(crate) trait EmptyObject {
    /// The value of JSON's `{}`.
    fn empty() -> Self;
}

/// A Go struct with no fields (JSON `{}`); whatever the message holds is skipped.
pub(crate) struct Empty<T>(std::marker::PhantomData<T>);
impl<T: EmptyObject> Codec for Empty<T> {
    type V = T;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<T>, DecodeError> {
        nested(r, |_, wire, r| r.skip(wire))?;
        Ok(Some(T::empty()))
    }
}

/// `resource.Quantity`: `message Quantity { optional string string = 1; }`.
pub(crate) struct QuantityC;
impl Codec for QuantityC {
    type V = Quantity;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<Quantity>, DecodeError> {
        let mut out = String::new();
        nested(r, |tag, wire, r| match tag {
            1 => {
                Reader::expect(wire, Wire::Bytes)?;
                out = utf8(r.bytes()?)?.to_owned();
                Ok(())
            }
            _ => r.skip(wire),
        })
        .map_err(|e| e.at("Quantity", "string", 1))?;
        Ok(Some(Quantity(out)))
    }
    fn missing() -> Option<Self::V> {
        Some(Default::default())
    }
}

/// A `Timestamp`-shaped message (`seconds` = 1, `nanos` = 2); `None` for Go's zero time.
fn timestamp(r: &mut Reader<'_>, name: &'static str) -> Result<Option<(i64, i32)>, DecodeError> {
    let mut seconds = 0;
    let mut nanos = 0;
    let mut empty = true;
    nested(r, |tag, wire, r| {
        empty = false;
        match tag {
            1 => {
                Reader::expect(wire, Wire::Varint).map_err(|e| e.at(name, "seconds", 1))?;
                seconds = I64::read(r)?.unwrap_or_default();
            }
            2 => {
                Reader::expect(wire, Wire::Varint).map_err(|e| e.at(name, "nanos", 2))?;
                nanos = I32::read(r)?.unwrap_or_default();
            }
            _ => r.skip(wire)?,
        }
        Ok(())
    })?;
    // Go's zero time.Time (January 1 of year 1) is written as an empty message; JSON writes
    // it `null`.
    const GO_ZERO: i64 = -62_135_596_800;
    if empty || (seconds == GO_ZERO && nanos == 0) {
        return Ok(None);
    }
    Ok(Some((seconds, nanos)))
}

fn jiff(seconds: i64, nanos: i32, name: &str) -> Result<Timestamp, DecodeError> {
    Timestamp::new(seconds, nanos).map_err(|e| {
        DecodeError::new(format!(
            "{name} out of range ({seconds} s, {nanos} ns): {e}"
        ))
    })
}

/// `metav1.Time`: seconds only, as Go reads it (and as its JSON carries it).
pub(crate) struct TimeC;
impl Codec for TimeC {
    type V = Time;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<Time>, DecodeError> {
        match timestamp(r, "Time")? {
            None => Ok(None),
            Some((seconds, _)) => Ok(Some(Time(jiff(seconds, 0, "Time")?))),
        }
    }
}

/// `metav1.MicroTime`: nanoseconds truncated to microseconds, as Go reads it.
pub(crate) struct MicroTimeC;
impl Codec for MicroTimeC {
    type V = MicroTime;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<MicroTime>, DecodeError> {
        match timestamp(r, "MicroTime")? {
            None => Ok(None),
            Some((seconds, nanos)) => Ok(Some(MicroTime(jiff(
                seconds,
                nanos - nanos % 1000,
                "MicroTime",
            )?))),
        }
    }
}

/// `metav1.Duration` (`duration` = 1, nanoseconds), as the string Go's JSON writes. No
/// Kubernetes 1.37 kind has a Duration field; the generator maps one should it appear.
#[allow(dead_code)]
pub(crate) struct DurationC;
impl Codec for DurationC {
    type V = String;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<String>, DecodeError> {
        let mut nanos = 0;
        nested(r, |tag, wire, r| match tag {
            1 => {
                Reader::expect(wire, Wire::Varint).map_err(|e| e.at("Duration", "duration", 1))?;
                nanos = I64::read(r)?.unwrap_or_default();
                Ok(())
            }
            _ => r.skip(wire),
        })?;
        Ok(Some(go_duration(nanos)))
    }
}

/// What Go's `time.Duration.String` makes of `nanos`: `1h2m3.5s`, `1.5ms`, `0s`.
#[allow(dead_code)]
pub(crate) fn go_duration(nanos: i64) -> String {
    fn fraction(out: &mut String, mut frac: u64, digits: u32) {
        if frac == 0 {
            return;
        }
        let mut digits = digits;
        while frac.is_multiple_of(10) {
            frac /= 10;
            digits -= 1;
        }
        out.push('.');
        out.push_str(&format!("{frac:0width$}", width = digits as usize));
    }
    let mut out = String::new();
    if nanos < 0 {
        out.push('-');
    }
    let u = nanos.unsigned_abs();
    if u == 0 {
        return "0s".to_owned();
    }
    if u < 1_000_000_000 {
        let (unit, digits) = match u {
            0..1_000 => ("ns", 0),
            1_000..1_000_000 => ("µs", 3),
            _ => ("ms", 6),
        };
        let scale = 10u64.pow(digits);
        out.push_str(&(u / scale).to_string());
        fraction(&mut out, u % scale, digits);
        out.push_str(unit);
        return out;
    }
    let seconds = u / 1_000_000_000;
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&s.to_string());
    fraction(&mut out, u % 1_000_000_000, 9);
    out.push('s');
    out
}

/// `intstr.IntOrString`: `type` = 1 (0 int, 1 string), `intVal` = 2, `strVal` = 3.
pub(crate) struct IntOrStr;
impl Codec for IntOrStr {
    type V = IntOrString;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<IntOrString>, DecodeError> {
        let (mut kind, mut int, mut string) = (0, 0, String::new());
        nested(r, |tag, wire, r| {
            match tag {
                1 => {
                    Reader::expect(wire, Wire::Varint)
                        .map_err(|e| e.at("IntOrString", "type", 1))?;
                    kind = I64::read(r)?.unwrap_or_default();
                }
                2 => {
                    Reader::expect(wire, Wire::Varint)
                        .map_err(|e| e.at("IntOrString", "intVal", 2))?;
                    int = I32::read(r)?.unwrap_or_default();
                }
                3 => {
                    Reader::expect(wire, Wire::Bytes)
                        .map_err(|e| e.at("IntOrString", "strVal", 3))?;
                    string = Str::read(r)
                        .map_err(|e| e.at("IntOrString", "strVal", 3))?
                        .unwrap_or_default();
                }
                _ => r.skip(wire)?,
            }
            Ok(())
        })?;
        Ok(Some(match kind {
            0 => IntOrString::Int(int),
            1 => IntOrString::String(string),
            other => {
                return Err(DecodeError::new(format!(
                    "IntOrString of type {other} (0 is int, 1 string)"
                )));
            }
        }))
    }
}

/// A message whose field 1 is raw JSON (`RawExtension`, `FieldsV1`, apiextensions' `JSON`).
/// `None` when empty: Go writes a nil `Raw` as `null`.
fn raw_json(
    r: &mut Reader<'_>,
    name: &'static str,
) -> Result<Option<serde_json::Value>, DecodeError> {
    let mut raw: &[u8] = &[];
    let bytes = r.bytes()?;
    let mut inner = Reader::new(bytes, r.depth + 1)?;
    while let Some((tag, wire)) = inner.key()? {
        match tag {
            1 => {
                Reader::expect(wire, Wire::Bytes).map_err(|e| e.at(name, "raw", 1))?;
                raw = inner.bytes()?;
            }
            _ => inner.skip(wire)?,
        }
    }
    if raw.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(raw).map(Some).map_err(|e| {
        DecodeError::new(format!("the raw bytes are not JSON ({e})")).at(name, "raw", 1)
    })
}

pub(crate) struct RawExt;
impl Codec for RawExt {
    type V = RawExtension;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<RawExtension>, DecodeError> {
        Ok(raw_json(r, "RawExtension")?.map(RawExtension))
    }
}

pub(crate) struct Fields;
impl Codec for Fields {
    type V = FieldsV1;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<FieldsV1>, DecodeError> {
        Ok(raw_json(r, "FieldsV1")?.map(FieldsV1))
    }
}

/// A named slice as a map's value, which protobuf wraps in a message of one repeated field
/// (`message ExtraValue { repeated string items = 1; }`).
pub(crate) struct Items<C>(std::marker::PhantomData<C>);
impl<C: Codec> Codec for Items<C> {
    type V = Vec<C::V>;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<Vec<C::V>>, DecodeError> {
        let mut out = Vec::new();
        nested(r, |tag, wire, r| match tag {
            1 => repeated::<C>(&mut out, r, wire),
            _ => r.skip(wire),
        })?;
        Ok(Some(out))
    }
    fn missing() -> Option<Self::V> {
        Some(Default::default())
    }
}

// The helpers the generated code calls, one per shape of field.

/// A singular field in an `Option`.
pub(crate) fn opt<C: Codec>(
    slot: &mut Option<C::V>,
    r: &mut Reader<'_>,
    wire: Wire,
    omit_zero: bool,
) -> Result<(), DecodeError> {
    Reader::expect(wire, C::WIRE)?;
    C::read_into_opt(slot, r, omit_zero)
}

/// A singular field the Rust type requires.
pub(crate) fn req<C: Codec>(
    slot: &mut C::V,
    r: &mut Reader<'_>,
    wire: Wire,
) -> Result<(), DecodeError> {
    Reader::expect(wire, C::WIRE)?;
    C::read_into(slot, r)
}

/// A repeated field, packed or not.
pub(crate) fn repeated<C: Codec>(
    slot: &mut Vec<C::V>,
    r: &mut Reader<'_>,
    wire: Wire,
) -> Result<(), DecodeError> {
    if C::PACKABLE && wire == Wire::Bytes {
        let first = slot.capacity() == 0;
        let bytes = r.bytes()?;
        let mut packed = Reader::new(bytes, r.depth)?;
        while !packed.at_end() {
            slot.extend(C::read(&mut packed)?);
        }
        if first {
            slot.shrink_to_fit();
        }
        return Ok(());
    }
    Reader::expect(wire, C::WIRE)?;
    // The field's first value: room for all of those that follow it at once, so that the
    // decoded object carries no spare capacity (and the cache need not copy it to shed
    // it) and the `Vec` is never regrown.
    if slot.capacity() == 0 {
        slot.reserve_exact(r.run_length(wire));
    }
    C::read_push(slot, r)
}

/// A repeated field in an `Option` (`None` while no element came).
pub(crate) fn rep_opt<C: Codec>(
    slot: &mut Option<Vec<C::V>>,
    r: &mut Reader<'_>,
    wire: Wire,
) -> Result<(), DecodeError> {
    repeated::<C>(slot.get_or_insert_with(Vec::new), r, wire)
}

/// One entry of a map field (`key` = 1, `value` = 2).
pub(crate) fn map<K: Codec, V: Codec>(
    slot: &mut BTreeMap<K::V, V::V>,
    r: &mut Reader<'_>,
    wire: Wire,
) -> Result<(), DecodeError>
where
    K::V: Ord + Default,
{
    Reader::expect(wire, Wire::Bytes)?;
    let (mut key, mut value) = (None, None);
    nested(r, |tag, wire, r| {
        match tag {
            1 => {
                Reader::expect(wire, K::WIRE).map_err(|e| e.at("map entry", "key", 1))?;
                key = K::read(r).map_err(|e| e.at("map entry", "key", 1))?;
            }
            2 => {
                Reader::expect(wire, V::WIRE).map_err(|e| e.at("map entry", "value", 2))?;
                value = V::read(r).map_err(|e| e.at("map entry", "value", 2))?;
            }
            _ => r.skip(wire)?,
        }
        Ok(())
    })?;
    if let Some(value) = value.or_else(V::missing) {
        slot.insert(key.unwrap_or_default(), value);
    }
    Ok(())
}

/// A map field in an `Option` (`None` while no entry came).
pub(crate) fn map_opt<K: Codec, V: Codec>(
    slot: &mut Option<BTreeMap<K::V, V::V>>,
    r: &mut Reader<'_>,
    wire: Wire,
) -> Result<(), DecodeError>
where
    K::V: Ord + Default,
{
    map::<K, V>(slot.get_or_insert_with(BTreeMap::new), r, wire)
}

/// An inline (embedded) struct: a nested message whose fields are the host's own in JSON
/// (`VolumeSource` in `Volume`). `fields` reads them into the host.
pub(crate) fn inline<H>(
    host: &mut H,
    r: &mut Reader<'_>,
    wire: Wire,
    fields: fn(&mut H, &[u8], u32) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    Reader::expect(wire, Wire::Bytes)?;
    let bytes = r.bytes()?;
    fields(host, bytes, r.depth + 1)
}

// apiextensions.k8s.io/v1's schema types, whose JSON is not their fields'.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;

/// apiextensions' `JSON` (`raw` = 1, JSON bytes).
pub(crate) struct ExtJson;
impl Codec for ExtJson {
    type V = ext::JSON;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<ext::JSON>, DecodeError> {
        Ok(raw_json(r, "JSON")?.map(ext::JSON))
    }
}

/// A message of an optional schema (`schema` = 1 or 2) and something else, as Go reads it.
fn schema_or(
    r: &mut Reader<'_>,
    name: &'static str,
    schema_tag: u32,
    mut other: impl FnMut(u32, Wire, &mut Reader<'_>) -> Result<bool, DecodeError>,
) -> Result<Option<ext::JSONSchemaProps>, DecodeError> {
    let mut schema = None;
    nested(r, |tag, wire, r| {
        if tag == schema_tag {
            return opt::<Msg<ext::JSONSchemaProps>>(&mut schema, r, wire, false)
                .map_err(|e| e.at(name, "schema", tag));
        }
        if other(tag, wire, r)? {
            return Ok(());
        }
        r.skip(wire)
    })?;
    Ok(schema)
}

/// `JSONSchemaPropsOrArray`: `schema` = 1, `jSONSchemas` = 2; JSON writes the array when it
/// has items, else the schema.
pub(crate) struct PropsOrArray;
impl Codec for PropsOrArray {
    type V = ext::JSONSchemaPropsOrArray;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<Self::V>, DecodeError> {
        let mut schemas = Vec::new();
        let schema = schema_or(r, "JSONSchemaPropsOrArray", 1, |tag, wire, r| {
            if tag != 2 {
                return Ok(false);
            }
            repeated::<Msg<ext::JSONSchemaProps>>(&mut schemas, r, wire)
                .map_err(|e| e.at("JSONSchemaPropsOrArray", "jSONSchemas", 2))?;
            Ok(true)
        })?;
        Ok(if !schemas.is_empty() {
            Some(ext::JSONSchemaPropsOrArray::Schemas(schemas))
        } else {
            schema.map(|s| ext::JSONSchemaPropsOrArray::Schema(Box::new(s)))
        })
    }
}

/// `JSONSchemaPropsOrBool`: `allows` = 1, `schema` = 2; JSON writes the schema when there is
/// one, else the bool.
pub(crate) struct PropsOrBool;
impl Codec for PropsOrBool {
    type V = ext::JSONSchemaPropsOrBool;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<Self::V>, DecodeError> {
        let mut allows = false;
        let schema = schema_or(r, "JSONSchemaPropsOrBool", 2, |tag, wire, r| {
            if tag != 1 {
                return Ok(false);
            }
            req::<Bool>(&mut allows, r, wire)
                .map_err(|e| e.at("JSONSchemaPropsOrBool", "allows", 1))?;
            Ok(true)
        })?;
        Ok(Some(match schema {
            Some(s) => ext::JSONSchemaPropsOrBool::Schema(Box::new(s)),
            None => ext::JSONSchemaPropsOrBool::Bool(allows),
        }))
    }
}

/// `JSONSchemaPropsOrStringArray`: `schema` = 1, `property` = 2; JSON writes the strings
/// when there are some, else the schema.
pub(crate) struct PropsOrStrings;
impl Codec for PropsOrStrings {
    type V = ext::JSONSchemaPropsOrStringArray;
    const WIRE: Wire = Wire::Bytes;
    fn read(r: &mut Reader<'_>) -> Result<Option<Self::V>, DecodeError> {
        let mut strings = Vec::new();
        let schema = schema_or(r, "JSONSchemaPropsOrStringArray", 1, |tag, wire, r| {
            if tag != 2 {
                return Ok(false);
            }
            repeated::<Str>(&mut strings, r, wire)
                .map_err(|e| e.at("JSONSchemaPropsOrStringArray", "property", 2))?;
            Ok(true)
        })?;
        Ok(if !strings.is_empty() {
            Some(ext::JSONSchemaPropsOrStringArray::Strings(strings))
        } else {
            schema.map(|s| ext::JSONSchemaPropsOrStringArray::Schema(Box::new(s)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::go_duration;

    #[test]
    fn durations_read_as_go_writes_them() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(1), "1ns");
        assert_eq!(go_duration(1_500), "1.5µs");
        assert_eq!(go_duration(1_500_000), "1.5ms");
        assert_eq!(go_duration(100_000_000), "100ms");
        assert_eq!(go_duration(1_000_000_000), "1s");
        assert_eq!(go_duration(90 * 1_000_000_000), "1m30s");
        assert_eq!(go_duration(3600 * 1_000_000_000), "1h0m0s");
        assert_eq!(go_duration(3_723_500_000_000), "1h2m3.5s");
        assert_eq!(go_duration(-1_500_000_000), "-1.5s");
    }
}
