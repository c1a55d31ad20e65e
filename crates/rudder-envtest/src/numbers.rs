//! Numbers a JSON decoder must keep exact, and how to read them back without one.
//!
//! [`floats`] is a corpus of doubles in the shortest form Go's `encoding/json` and
//! JavaScript write (the extremes, subnormals, `-0.0`, and a fixed pseudo-random spread over
//! every exponent and over `[0, 1)`, where a parser that is not correctly rounded is one unit
//! in the last place off for about one in ten); [`integers`] the integers a double cannot
//! hold (beyond 2^53) up to the 64-bit limits. [`array()`] reads the number tokens of a JSON
//! array from text, with no JSON library, and [`same_float`] compares two tokens with the
//! standard library's correctly rounded parser: a test's oracle that is not the code it
//! tests.
//!
//! ```
//! use rudder_envtest::numbers::{array, floats, same_float};
//!
//! let corpus = floats();
//! let json = format!(r#"{{"spec":{{"ratios":[{}]}}}}"#, corpus.join(","));
//! let read = array(&json, "ratios").unwrap();
//! assert!(read.iter().zip(&corpus).all(|(a, b)| same_float(a, b)));
//! ```

/// Doubles as decimal text, valid JSON numbers (shortest forms but for a few written as
/// people write them, `9007199254740993.0`): fixed cases first, then 512 pseudo-random ones
/// (the same on every run).
pub fn floats() -> Vec<String> {
    let mut corpus: Vec<String> = [
        // Found one unit in the last place off through a conversion webhook.
        "0.9564959075063557",
        "-8.010580466467539e-113",
        // The extremes: smallest subnormal, largest subnormal, smallest normal, largest.
        "5e-324",
        "-5e-324",
        "2.225073858507201e-308",
        "2.2250738585072014e-308",
        "1.7976931348623157e+308",
        "-1.7976931348623157e+308",
        "-0.0",
        "0.1",
        "0.30000000000000004",
        "1e+21",
        "1e-7",
        "123456789.12345679",
        "9007199254740993.0",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // xorshift64*: deterministic, no dependency.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    while corpus.len() < 15 + 512 {
        let bits = next();
        if corpus.len().is_multiple_of(2) {
            // Any finite double, written with an exponent.
            let value = f64::from_bits(bits);
            if value.is_finite() {
                corpus.push(format!("{value:e}"));
            }
        } else {
            // A double in [0, 1), written as Go writes those: plain decimals.
            #[allow(clippy::cast_precision_loss, reason = "53 bits fit a double exactly")]
            let value = (bits >> 11) as f64 / (1u64 << 53) as f64;
            corpus.push(format!("{value}"));
        }
    }
    corpus
}

/// Integers a double cannot hold exactly, and the 64-bit limits.
pub fn integers() -> Vec<String> {
    [
        "9007199254740993",
        "-9007199254740993",
        "9007199254740995",
        "1152921504606846977",
        "9223372036854775807",
        "-9223372036854775808",
        "0",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

/// The tokens of the first JSON array under the key `field` in `json` (`"field":[...]`,
/// whitespace allowed around the colon and the tokens), as text; `None` if there is no such
/// array. Meant for arrays of numbers: a token is whatever lies between commas.
pub fn array(json: &str, field: &str) -> Option<Vec<String>> {
    let key = format!("\"{field}\"");
    let after = &json[json.find(&key)? + key.len()..];
    let after = after.trim_start().strip_prefix(':')?.trim_start();
    let inner = after.strip_prefix('[')?;
    let inner = &inner[..inner.find(']')?];
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    Some(inner.split(',').map(|t| t.trim().to_owned()).collect())
}

/// Whether two number tokens are the same double, read by the standard library's correctly
/// rounded parser (`-0.0` and `0` differ, as their bits do). `false` if either is no number.
pub fn same_float(a: &str, b: &str) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(a), Ok(b)) => a.to_bits() == b.to_bits(),
        _ => false,
    }
}
