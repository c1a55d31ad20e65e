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
    /// Parses `json`: a single pass over the bytes (strings without escapes are borrowed,
    /// escapes and numbers are read by serde_json), at most [`MAX_DEPTH`] levels deep.
    pub(crate) fn parse(json: &'a [u8]) -> Result<Self, ParseError> {
        let text = std::str::from_utf8(json).map_err(|_| ParseError::new("not UTF-8", 0))?;
        let mut parser = Parser {
            text,
            at: 0,
            depth: 0,
        };
        parser.skip_space();
        let tree = parser.value()?;
        parser.skip_space();
        if parser.at != text.len() {
            return Err(parser.error("trailing characters"));
        }
        Ok(tree)
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

/// How deeply arrays and objects may nest (serde_json's own limit).
pub(crate) const MAX_DEPTH: usize = 128;

/// Why a text is not a JSON document [`Tree::parse`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    message: &'static str,
    at: usize,
}

impl ParseError {
    fn new(message: &'static str, at: usize) -> Self {
        Self { message, at }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.message, self.at)
    }
}

impl std::error::Error for ParseError {}

/// A recursive-descent JSON reader over valid UTF-8.
struct Parser<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, message: &'static str) -> ParseError {
        ParseError::new(message, self.at)
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Consumes `byte` (after white space), or fails with `message`.
    fn expect(&mut self, byte: u8, message: &'static str) -> Result<(), ParseError> {
        self.skip_space();
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(message))
        }
    }

    fn value(&mut self) -> Result<Tree<'a>, ParseError> {
        match self.peek() {
            Some(b'{') => self.nested(Self::object),
            Some(b'[') => self.nested(Self::array),
            Some(b'"') => self.string().map(Tree::String),
            Some(b't') => self.word("true", Tree::Bool(true)),
            Some(b'f') => self.word("false", Tree::Bool(false)),
            Some(b'n') => self.word("null", Tree::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("expected a value")),
            None => Err(self.error("EOF while parsing a value")),
        }
    }

    fn nested(
        &mut self,
        read: fn(&mut Self) -> Result<Tree<'a>, ParseError>,
    ) -> Result<Tree<'a>, ParseError> {
        if self.depth == MAX_DEPTH {
            return Err(self.error("recursion limit exceeded"));
        }
        self.depth += 1;
        self.at += 1;
        let tree = read(self);
        self.depth -= 1;
        tree
    }

    fn object(&mut self) -> Result<Tree<'a>, ParseError> {
        let mut members: Vec<(Cow<'a, str>, Tree<'a>)> = Vec::new();
        self.separated(b'}', "expected ',' or '}'", |parser| {
            if parser.peek() != Some(b'"') {
                return Err(parser.error("expected an object key"));
            }
            let key = parser.string()?;
            parser.expect(b':', "expected ':'")?;
            parser.skip_space();
            let value = parser.value()?;
            if members.is_empty() {
                // Most objects of a Kubernetes object have a handful of members: one
                // allocation.
                members.reserve(8);
            }
            members.push((key, value));
            Ok(())
        })?;
        Ok(Tree::Object(sorted(members)))
    }

    fn array(&mut self) -> Result<Tree<'a>, ParseError> {
        let mut items = Vec::new();
        self.separated(b']', "expected ',' or ']'", |parser| {
            items.push(parser.value()?);
            Ok(())
        })?;
        Ok(Tree::Array(items))
    }

    /// Reads the comma-separated elements of an object or array (after its opening
    /// bracket) with `element`, up to and including `close`.
    fn separated(
        &mut self,
        close: u8,
        message: &'static str,
        mut element: impl FnMut(&mut Self) -> Result<(), ParseError>,
    ) -> Result<(), ParseError> {
        self.skip_space();
        if self.peek() == Some(close) {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.skip_space();
            element(self)?;
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(byte) if byte == close => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(self.error(message)),
            }
        }
    }

    /// A string at the opening quote: borrowed when it has no escapes, else decoded by
    /// serde_json.
    fn string(&mut self) -> Result<Cow<'a, str>, ParseError> {
        let open = self.at;
        let bytes = self.text.as_bytes();
        let mut at = open + 1;
        while let Some(&b) = bytes.get(at) {
            match b {
                b'"' => {
                    self.at = at + 1;
                    return Ok(Cow::Borrowed(&self.text[open + 1..at]));
                }
                b'\\' => return self.escaped_string(open),
                0..0x20 => {
                    self.at = at;
                    return Err(self.error("control character in a string"));
                }
                _ => at += 1,
            }
        }
        self.at = at;
        Err(self.error("EOF while parsing a string"))
    }

    fn escaped_string(&mut self, open: usize) -> Result<Cow<'a, str>, ParseError> {
        let bytes = self.text.as_bytes();
        let mut at = open + 1;
        while let Some(&b) = bytes.get(at) {
            match b {
                b'"' => break,
                // The escaped character is skipped (an escaped quote does not end it).
                b'\\' => at += 2,
                _ => at += 1,
            }
        }
        if at >= bytes.len() {
            self.at = bytes.len();
            return Err(self.error("EOF while parsing a string"));
        }
        let quoted = &self.text[open..=at];
        match serde_json::from_str::<String>(quoted) {
            Ok(decoded) => {
                self.at = at + 1;
                Ok(Cow::Owned(decoded))
            }
            Err(_) => Err(self.error("invalid string")),
        }
    }

    fn number(&mut self) -> Result<Tree<'a>, ParseError> {
        let start = self.at;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.peek() {
            self.at += 1;
        }
        // serde_json decides what the number is (integer or float), as it does for a Value.
        match serde_json::from_str::<Value>(&self.text[start..self.at]) {
            Ok(Value::Number(number)) => Ok(Tree::Number(number)),
            Ok(_) | Err(_) => Err(ParseError::new("invalid number", start)),
        }
    }

    fn word(&mut self, word: &'static str, tree: Tree<'a>) -> Result<Tree<'a>, ParseError> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(tree)
        } else {
            Err(self.error("expected a value"))
        }
    }
}

/// An object's members sorted by key, each key once: the last occurrence wins, as in a
/// `Value`.
fn sorted<'a>(mut members: Vec<(Cow<'a, str>, Tree<'a>)>) -> Vec<(Cow<'a, str>, Tree<'a>)> {
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
    members
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
        let deep = "{\"a\":".repeat(MAX_DEPTH + 1) + "1" + &"}".repeat(MAX_DEPTH + 1);
        assert!(Tree::parse(deep.as_bytes()).is_err());
        let fits = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(Tree::parse(fits.as_bytes()).is_ok());
    }

    #[test]
    fn what_serde_json_refuses_is_refused() {
        for text in [
            "",
            " ",
            "{",
            "[1,]",
            "{,}",
            "{\"a\" 1}",
            "{\"a\":1,}",
            "{1:2}",
            "tru",
            "nul",
            "01",
            "1.",
            "-",
            "+1",
            "1e",
            "\"open",
            "\"bad \\x escape\"",
            "\"\\u12\"",
            "\"tab\there\"",
            "\"\\",
            "[1] 2",
            "{\"a\":1}}",
            "\"\\\"",
        ] {
            let ours = Tree::parse(text.as_bytes());
            assert!(ours.is_err(), "{text:?} read as {ours:?}");
            assert!(serde_json::from_str::<Value>(text).is_err(), "{text:?}");
        }
        assert!(Tree::parse(b"\"\xff\"").is_err(), "not UTF-8");
        // Escapes after multi-byte characters, and around quotes.
        let text = r#"{"\u00e9\"k": ["\u00e9\\", "a\"b", "\ud83d\ude00", "é\"é"]}"#;
        let value: Value = serde_json::from_str(text).unwrap_or_default();
        assert_eq!(parse(text).to_value(), value);
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
            // One compact, one indented: white space wherever JSON allows it.
            let (text_a, text_b) = (serde_json::to_vec(&a).unwrap_or_default(), serde_json::to_vec_pretty(&b).unwrap_or_default());
            let read = |text: &[u8]| serde_json::from_slice::<Value>(text).unwrap_or_default();
            let (value_a, value_b) = (read(&text_a), read(&text_b));
            let (tree_a, tree_b) = (Tree::parse(&text_a).unwrap_or(Tree::Null), Tree::parse(&text_b).unwrap_or(Tree::Null));
            prop_assert_eq!(&tree_a.to_value(), &value_a);
            prop_assert_eq!(&tree_b.to_value(), &value_b);
            prop_assert_eq!(tree_a == tree_b, value_a == value_b);
            prop_assert_eq!(tree_a == tree_a.clone(), true);
        }
    }
}
