//! The defaulting patch: from the object as received to the defaulted one, touching only
//! what the defaulter changed, so fields the typed object does not know are kept.

use serde_json::{Map, Value};

/// The JSON patch that turns `original` (the object as the API server sent it) into the
/// defaulted object.
///
/// `before` is the typed object as decoded from `original` and encoded again, `after` the
/// same once defaulted. A plain diff from `original` to `after` would remove every field
/// the type does not know (and add every default its encoding writes); instead the change
/// from `before` to `after` is laid over `original`: a value the defaulter left alone keeps
/// its original form, unknown fields included; a field it removed is removed; a new or
/// changed value comes from `after`. Arrays are merged element by element when the three
/// have the same length, and replaced by `after`'s otherwise.
pub fn defaulting_patch(original: &Value, before: &Value, after: &Value) -> json_patch::Patch {
    let target = overlay(Some(original), Some(before), after);
    json_patch::diff(original, &target)
}

fn overlay(original: Option<&Value>, before: Option<&Value>, after: &Value) -> Value {
    if before == Some(after) {
        // The defaulter did not touch this value: keep it as it came (or absent).
        return original.cloned().unwrap_or_else(|| after.clone());
    }
    match (original, before, after) {
        (Some(Value::Object(original)), Some(Value::Object(before)), Value::Object(after)) => {
            let mut merged: Map<String, Value> = original.clone();
            for (key, after_value) in after {
                if before.get(key) == Some(after_value) {
                    // Unchanged by the defaulter: whatever the original had stays (a default
                    // the encoding wrote but the original lacked is not added).
                    continue;
                }
                let value = overlay(original.get(key), before.get(key), after_value);
                merged.insert(key.clone(), value);
            }
            for key in before.keys() {
                if !after.contains_key(key) {
                    merged.remove(key);
                }
            }
            Value::Object(merged)
        }
        (Some(Value::Array(original)), Some(Value::Array(before)), Value::Array(after))
            if original.len() == before.len() && before.len() == after.len() =>
        {
            Value::Array(
                original
                    .iter()
                    .zip(before)
                    .zip(after)
                    .map(|((original, before), after)| overlay(Some(original), Some(before), after))
                    .collect(),
            )
        }
        _ => after.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn apply(original: &Value, patch: &json_patch::Patch) -> Value {
        let mut doc = original.clone();
        match json_patch::patch(&mut doc, patch) {
            Ok(()) => doc,
            Err(error) => panic!("patch {patch:?} does not apply: {error}"),
        }
    }

    #[test]
    fn unknown_fields_are_kept_and_only_defaulted_fields_change() {
        let original = json!({
            "metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"known": 1, "unknown": {"deep": true}, "items": [{"n": 1, "extra": 2}]},
        });
        // The typed view lacks `unknown` and `extra`, and writes a default `count: 0`.
        let before = json!({
            "metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"known": 1, "count": 0, "items": [{"n": 1}]},
        });
        let after = json!({
            "metadata": {"name": "a", "labels": {"x": "1", "defaulted": "yes"}},
            "spec": {"known": 1, "count": 0, "items": [{"n": 5}], "mode": "auto"},
        });
        let patch = defaulting_patch(&original, &before, &after);
        let patched = apply(&original, &patch);
        assert_eq!(
            patched,
            json!({
                "metadata": {"name": "a", "labels": {"x": "1", "defaulted": "yes"}},
                "spec": {"known": 1, "unknown": {"deep": true}, "items": [{"n": 5, "extra": 2}], "mode": "auto"},
            })
        );
        let text = serde_json::to_string(&patch).unwrap_or_default();
        assert!(!text.contains("\"remove\""), "{text}");
    }

    #[test]
    fn a_field_the_defaulter_removes_is_removed() {
        let original = json!({"spec": {"a": 1, "b": 2, "z": 3}});
        let before = json!({"spec": {"a": 1, "b": 2}});
        let after = json!({"spec": {"a": 1}});
        let patched = apply(&original, &defaulting_patch(&original, &before, &after));
        assert_eq!(patched, json!({"spec": {"a": 1, "z": 3}}));
    }

    #[test]
    fn a_changed_field_missing_from_the_original_is_added() {
        let original = json!({"spec": {}});
        let before = json!({"spec": {"replicas": 0}});
        let after = json!({"spec": {"replicas": 3}});
        let patched = apply(&original, &defaulting_patch(&original, &before, &after));
        assert_eq!(patched, json!({"spec": {"replicas": 3}}));
    }

    #[test]
    fn nothing_changed_is_an_empty_patch() {
        let original = json!({"spec": {"a": 1, "unknown": 2}});
        let before = json!({"spec": {"a": 1}});
        assert!(defaulting_patch(&original, &before, &before).0.is_empty());
    }
}
