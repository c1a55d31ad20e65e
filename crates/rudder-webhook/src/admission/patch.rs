//! The defaulting patch: from the object as received to the defaulted one, touching only
//! what the defaulter changed, so fields the typed object does not know are kept.

use json_patch::jsonptr::PointerBuf;
use json_patch::{
    AddOperation, CopyOperation, MoveOperation, PatchOperation, RemoveOperation, ReplaceOperation,
    TestOperation,
};
use serde_json::Value;

use super::tree::Tree;

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
    patch_between(original, before, after)
}

/// [`defaulting_patch`] for any document representation (the server uses [`Tree`]s, which
/// borrow from the bytes received and encoded).
pub(crate) fn patch_between<D: Document>(original: &D, before: &D, after: &D) -> json_patch::Patch {
    // The operations are written while walking only what the defaulter changed: the
    // target is never built, and unchanged subtrees are never copied or compared with the
    // original.
    let mut patch = json_patch::Patch(Vec::new());
    let mut pointer = PointerBuf::root();
    changes(original, before, after, &mut pointer, &mut patch);
    patch
}

/// What the patch needs of a JSON document: equality, objects' members, arrays' elements.
pub(crate) trait Document: PartialEq + Sized {
    /// The members of an object, in key order; `None` if this is not an object.
    fn members(&self) -> Option<impl Iterator<Item = (&str, &Self)>>;
    /// The member `key`, if this is an object that has it.
    fn member(&self, key: &str) -> Option<&Self>;
    /// The elements of an array; `None` if this is not an array.
    fn elements(&self) -> Option<&[Self]>;
    /// The value, as the patch carries it.
    fn to_value(&self) -> Value;
    /// The plain diff from `original` to `after`.
    fn diff(original: &Self, after: &Self) -> json_patch::Patch;
}

impl Document for Value {
    fn members(&self) -> Option<impl Iterator<Item = (&str, &Self)>> {
        self.as_object()
            .map(|map| map.iter().map(|(k, v)| (k.as_str(), v)))
    }

    fn member(&self, key: &str) -> Option<&Self> {
        self.as_object()?.get(key)
    }

    fn elements(&self) -> Option<&[Self]> {
        self.as_array().map(Vec::as_slice)
    }

    fn to_value(&self) -> Value {
        self.clone()
    }

    fn diff(original: &Self, after: &Self) -> json_patch::Patch {
        json_patch::diff(original, after)
    }
}

impl Document for Tree<'_> {
    fn members(&self) -> Option<impl Iterator<Item = (&str, &Self)>> {
        match self {
            Tree::Object(members) => Some(members.iter().map(|(k, v)| (k.as_ref(), v))),
            _ => None,
        }
    }

    fn member(&self, key: &str) -> Option<&Self> {
        self.get(key)
    }

    fn elements(&self) -> Option<&[Self]> {
        match self {
            Tree::Array(items) => Some(items),
            _ => None,
        }
    }

    fn to_value(&self) -> Value {
        Tree::to_value(self)
    }

    fn diff(original: &Self, after: &Self) -> json_patch::Patch {
        // Where the typed view and the original disagree in shape: rare, so converted.
        json_patch::diff(&original.to_value(), &after.to_value())
    }
}

/// Appends to `patch` the operations at `pointer` that turn `original` into `before`'s
/// change to `after` laid over `original` (see [`defaulting_patch`]).
fn changes<D: Document>(
    original: &D,
    before: &D,
    after: &D,
    pointer: &mut PointerBuf,
    patch: &mut json_patch::Patch,
) {
    if before == after {
        // The defaulter did not touch this value: it keeps its original form.
        return;
    }
    if let (Some(_), Some(before_members), Some(after_members)) =
        (original.members(), before.members(), after.members())
    {
        for (key, after_value) in after_members {
            let before_value = before.member(key);
            if before_value == Some(after_value) {
                // Unchanged by the defaulter: whatever the original had stays (a default
                // the encoding wrote but the original lacked is not added).
                continue;
            }
            pointer.push_back(key);
            match (original.member(key), before_value) {
                (Some(original_value), Some(before_value)) => {
                    changes(original_value, before_value, after_value, pointer, patch);
                }
                (Some(original_value), None) => {
                    diff_at(original_value, after_value, pointer, patch);
                }
                (None, _) => patch.0.push(PatchOperation::Add(AddOperation {
                    path: pointer.clone(),
                    value: after_value.to_value(),
                })),
            }
            pointer.pop_back();
        }
        for (key, _) in before_members {
            if after.member(key).is_none() && original.member(key).is_some() {
                pointer.push_back(key);
                patch.0.push(PatchOperation::Remove(RemoveOperation {
                    path: pointer.clone(),
                }));
                pointer.pop_back();
            }
        }
        return;
    }
    if let (Some(original_items), Some(before_items), Some(after_items)) =
        (original.elements(), before.elements(), after.elements())
        && original_items.len() == before_items.len()
        && before_items.len() == after_items.len()
    {
        for (index, ((original, before), after)) in original_items
            .iter()
            .zip(before_items)
            .zip(after_items)
            .enumerate()
        {
            pointer.push_back(index);
            changes(original, before, after, pointer, patch);
            pointer.pop_back();
        }
        return;
    }
    diff_at(original, after, pointer, patch);
}

/// Appends the plain diff from `original` to `after`, both at `pointer`.
fn diff_at<D: Document>(
    original: &D,
    after: &D,
    pointer: &PointerBuf,
    patch: &mut json_patch::Patch,
) {
    for mut operation in D::diff(original, after).0 {
        match &mut operation {
            PatchOperation::Add(AddOperation { path, .. })
            | PatchOperation::Remove(RemoveOperation { path })
            | PatchOperation::Replace(ReplaceOperation { path, .. })
            | PatchOperation::Test(TestOperation { path, .. }) => {
                *path = pointer.concat(path);
            }
            PatchOperation::Move(MoveOperation { from, path })
            | PatchOperation::Copy(CopyOperation { from, path }) => {
                *from = pointer.concat(from);
                *path = pointer.concat(path);
            }
        }
        patch.0.push(operation);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    use serde_json::Map;

    use crate::admission::tree::tests::any_json;

    /// The target the patch must reach, built whole: `before`'s change to `after` laid over
    /// `original` (what the patch was first computed from, with a diff from `original`).
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
                        .map(|((original, before), after)| {
                            overlay(Some(original), Some(before), after)
                        })
                        .collect(),
                )
            }
            _ => after.clone(),
        }
    }

    /// The patch applied to `original` reaches the overlay target.
    fn check(original: &Value, before: &Value, after: &Value) -> Value {
        let patched = apply(original, &defaulting_patch(original, before, after));
        assert_eq!(patched, overlay(Some(original), Some(before), after));
        patched
    }

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
        let patched = check(&original, &before, &after);
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
        let patched = check(&original, &before, &after);
        assert_eq!(patched, json!({"spec": {"a": 1, "z": 3}}));
    }

    #[test]
    fn a_changed_field_missing_from_the_original_is_added() {
        let original = json!({"spec": {}});
        let before = json!({"spec": {"replicas": 0}});
        let after = json!({"spec": {"replicas": 3}});
        let patched = check(&original, &before, &after);
        assert_eq!(patched, json!({"spec": {"replicas": 3}}));
    }

    #[test]
    fn nothing_changed_is_an_empty_patch() {
        let original = json!({"spec": {"a": 1, "unknown": 2}});
        let before = json!({"spec": {"a": 1}});
        assert!(defaulting_patch(&original, &before, &before).0.is_empty());
    }

    #[test]
    fn changes_below_replaced_or_resized_values_reach_the_target() {
        // A new subtree where the original has another (the typed view had none there).
        let original = json!({"spec": {"a": {"x": 1, "y": [1, 2]}, "b": [1, 2, 3]}, "z": "keep"});
        let before = json!({"spec": {"b": [1, 2, 3]}});
        let after = json!({"spec": {"a": {"x": 2}, "b": [1, 2], "c": null}, "w": {"k/~": 1}});
        check(&original, &before, &after);
        // A type change, an array resized, keys with characters a pointer escapes.
        let original = json!({"m": {"a/b": 1, "t~": [0]}, "n": 5});
        let before = json!({"m": {"a/b": 1, "t~": [0]}, "n": 5});
        let after = json!({"m": {"a/b": "one", "t~": [0, 1]}, "n": {"now": "object"}});
        check(&original, &before, &after);
        // The whole document replaced.
        check(&json!([1]), &json!([1]), &json!({"a": 1}));
    }

    proptest::proptest! {
        /// The server computes the patch on [`Tree`]s read from the bytes; it is the patch
        /// computed on `Value`s, operation for operation.
        #[test]
        fn trees_give_the_patch_values_give(
            original in any_json(),
            before in any_json(),
            after in any_json(),
        ) {
            let texts = [&original, &before, &after].map(|v| serde_json::to_vec(v).unwrap_or_default());
            let values = texts.clone().map(|t| serde_json::from_slice::<Value>(&t).unwrap_or_default());
            let trees: Vec<Tree<'_>> = texts.iter().map(|t| Tree::parse(t).unwrap_or(Tree::Null)).collect();
            let from_values = defaulting_patch(&values[0], &values[1], &values[2]);
            let from_trees = patch_between(&trees[0], &trees[1], &trees[2]);
            proptest::prop_assert_eq!(from_trees, from_values);
        }

        /// Related documents (the after is the before with some members changed), where the
        /// walk goes deep rather than replacing at the top.
        #[test]
        fn trees_give_the_patch_values_give_for_small_changes(
            original in any_json(),
            changed in any_json(),
            key in "[a-d~/]{0,2}",
        ) {
            let before = original.clone();
            let mut after = before.clone();
            if let Value::Object(members) = &mut after {
                members.insert(key, changed);
            }
            let texts = [&original, &before, &after].map(|v| serde_json::to_vec(v).unwrap_or_default());
            let values = texts.clone().map(|t| serde_json::from_slice::<Value>(&t).unwrap_or_default());
            let trees: Vec<Tree<'_>> = texts.iter().map(|t| Tree::parse(t).unwrap_or(Tree::Null)).collect();
            let from_values = defaulting_patch(&values[0], &values[1], &values[2]);
            let from_trees = patch_between(&trees[0], &trees[1], &trees[2]);
            proptest::prop_assert_eq!(&from_trees, &from_values);
            check(&values[0], &values[1], &values[2]);
        }
    }
}
