//! rudder-webhook's defaulting patch: for any JSON `original` and `after`, the patch from
//! `original` (as `before` too) to `after`, applied to `original`, gives `after`; for any
//! three documents it applies to `original` without error; and the server's path (the
//! documents read as trees from their bytes) writes the same patch as the public function.
//!
//! Input: the three documents' JSON texts separated by `\0` (a missing `before` is
//! `original`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rudder_webhook::admission::defaulting_patch;
use rudder_webhook::admission::fuzzing::tree_patch;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let mut texts = data.splitn(3, |&byte| byte == 0);
    let original_text = texts.next().unwrap_or_default();
    let second = texts.next().unwrap_or_default();
    let third = texts.next();
    let (before_text, after_text) = match third {
        Some(after) => (second, after),
        None => (original_text, second),
    };
    let parse = |text: &[u8]| serde_json::from_slice::<Value>(text).ok();
    let (Some(original), Some(before), Some(after)) =
        (parse(original_text), parse(before_text), parse(after_text))
    else {
        return;
    };

    let patch = defaulting_patch(&original, &before, &after);
    let mut patched = original.clone();
    let applied = json_patch::patch(&mut patched, &patch);
    assert!(
        applied.is_ok(),
        "the patch {patch:?} does not apply to {original}: {applied:?}"
    );
    if original == before {
        assert_eq!(patched, after, "the patch {patch:?} of {original}");
    }

    if let Some(from_trees) = tree_patch(original_text, before_text, after_text) {
        assert_eq!(from_trees, patch, "the trees' patch and the values'");
    }
});
