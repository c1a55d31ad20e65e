//! [`Tree`]: a JSON document that borrows its strings from the bytes it was parsed from.
//!
//! The defaulting patch compares three versions of an object (as received, as the typed
//! object encodes before defaulting, and after). Parsed into `serde_json::Value`s, every key
//! and every string is a heap allocation and every object a B-tree, which made parsing,
//! comparing and dropping them most of the CPU a review cost. A `Tree` allocates one vector
//! per object or array and nothing for strings without escapes; its objects are sorted by
//! key so that lookups and equality are what they are for a `Value` (built without
//! `preserve_order`): the same keys with equal values, the last of a duplicated key kept.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserializer;
use serde::de::{self, Deserialize, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A parsed JSON value whose strings point into the parsed text where they can.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tree<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Tree<'a>>),
    /// Members sorted by key, each key once.
    Object(Vec<(Cow<'a, str>, Tree<'a>)>),
}

impl<'a> Tree<'a> {
    /// Parses `json` (with serde_json's limits: at most 128 levels deep).
    pub(crate) fn parse(json: &'a [u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(json)
    }

    /// The member `key` of an object (`None` for a missing key or a value that is not an
    /// object).
    pub(crate) fn get(&self, key: &str) -> Option<&Tree<'a>> {
        let Tree::Object(members) = self else {
            return None;
        };
        members
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .map(|at| &members[at].1)
    }

    /// The same document as a `serde_json::Value`.
    pub(crate) fn to_value(&self) -> Value {
        match self {
            Tree::Null => Value::Null,
            Tree::Bool(b) => Value::Bool(*b),
            Tree::Number(n) => Value::Number(n.clone()),
            Tree::String(s) => Value::String(s.as_ref().to_owned()),
            Tree::Array(items) => Value::Array(items.iter().map(Tree::to_value).collect()),
            Tree::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.as_ref().to_owned(), v.to_value()))
                    .collect::<Map<String, Value>>(),
            ),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Tree<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TreeVisitor(PhantomData))
    }
}

struct TreeVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for TreeVisitor<'a> {
    type Value = Tree<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Tree<'a>, E> {
        Ok(Tree::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Tree<'a>, E> {
        Ok(Tree::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Tree<'a>, E> {
        Ok(Tree::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Tree<'a>, E> {
        // As `Value`: a number JSON cannot hold is null.
        Ok(Number::from_f64(v).map_or(Tree::Null, Tree::Number))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Tree<'a>, E> {
        Ok(Tree::String(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Tree<'a>, E> {
        Ok(Tree::String(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Tree<'a>, E> {
        Ok(Tree::String(Cow::Owned(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Tree<'a>, E> {
        Ok(Tree::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Tree<'a>, E> {
        Ok(Tree::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Tree<'a>, D::Error> {
        Tree::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree<'a>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Tree::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree<'a>, A::Error> {
        let mut members: Vec<(Cow<'a, str>, Tree<'a>)> =
            Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(Key(key)) = map.next_key()? {
            let value = map.next_value()?;
            members.push((key, value));
        }
        if !members.is_sorted_by(|a, b| a.0 < b.0) {
            // Stable, so a repeated key's occurrences stay in order; the last one wins.
            members.sort_by(|a, b| a.0.cmp(&b.0));
            members.dedup_by(|later, kept| {
                if later.0 == kept.0 {
                    std::mem::swap(later, kept);
                    true
                } else {
                    false
                }
            });
        }
        Ok(Tree::Object(members))
    }
}

/// An object's key, borrowed from the text when it has no escapes (serde's own `Cow<str>`
/// always copies).
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor(PhantomData))
    }
}

struct KeyVisitor<'a>(PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for KeyVisitor<'a> {
    type Value = Key<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'a>, E> {
        Ok(Key(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'a>, E> {
        Ok(Key(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'a>, E> {
        Ok(Key(Cow::Owned(v)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn parse(text: &str) -> Tree<'_> {
        match Tree::parse(text.as_bytes()) {
            Ok(tree) => tree,
            Err(error) => panic!("{text}: {error}"),
        }
    }

    #[test]
    fn it_reads_what_a_value_reads() {
        let text = r#"{"b":[1,-2,3.5,true,null,"x\"y"],"a":{"k\u00e9":"v","z":{}},"n":18446744073709551615}"#;
        let value: Value = serde_json::from_str(text).unwrap_or_default();
        assert_eq!(parse(text).to_value(), value);
    }

    #[test]
    fn strings_without_escapes_are_borrowed() {
        let tree = parse(r#"{"plain":"text","esc\"aped":"a\nb"}"#);
        let Tree::Object(members) = &tree else {
            panic!("{tree:?}")
        };
        assert!(matches!(members[0].0, Cow::Owned(_)), "{members:?}");
        assert!(
            matches!(members[1].0, Cow::Borrowed("plain")),
            "{members:?}"
        );
        assert!(matches!(members[1].1, Tree::String(Cow::Borrowed("text"))));
        assert!(matches!(members[0].1, Tree::String(Cow::Owned(_))));
    }

    #[test]
    fn objects_compare_and_look_up_as_maps_and_the_last_duplicate_wins() {
        assert_eq!(parse(r#"{"a":1,"b":2}"#), parse(r#"{"b":2,"a":1}"#));
        assert_ne!(parse(r#"{"a":1}"#), parse(r#"{"a":1,"b":2}"#));
        assert_ne!(
            parse("1"),
            parse("1.0"),
            "as Value: an integer is not a float"
        );
        let dup = parse(r#"{"k":1,"a":0,"k":2,"k":3}"#);
        assert_eq!(dup.get("k"), Some(&parse("3")));
        assert_eq!(dup.to_value(), json!({"a": 0, "k": 3}));
        assert_eq!(dup.get("missing"), None);
        assert_eq!(parse("[1]").get("0"), None);
    }

    #[test]
    fn too_deep_is_an_error_not_a_crash() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(Tree::parse(deep.as_bytes()).is_err());
    }

    /// Any JSON document, a few levels deep, with keys and strings a pointer must escape.
    pub(crate) fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-c\"\\\\/\\n\u{e9}]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(("[a-d~/]{0,2}", inner), 0..5)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn equality_and_conversion_agree_with_value(a in any_json(), b in any_json()) {
            // Compared with Values read from the same text (serde_json's float parsing is
            // not exact round-trip, the same way for both).
            let (text_a, text_b) = (serde_json::to_vec(&a).unwrap_or_default(), serde_json::to_vec(&b).unwrap_or_default());
            let read = |text: &[u8]| serde_json::from_slice::<Value>(text).unwrap_or_default();
            let (value_a, value_b) = (read(&text_a), read(&text_b));
            let (tree_a, tree_b) = (Tree::parse(&text_a).unwrap_or(Tree::Null), Tree::parse(&text_b).unwrap_or(Tree::Null));
            prop_assert_eq!(&tree_a.to_value(), &value_a);
            prop_assert_eq!(tree_a == tree_b, value_a == value_b);
            prop_assert_eq!(tree_a == tree_a.clone(), true);
        }
    }
}
