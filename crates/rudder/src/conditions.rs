//! Status conditions: set, find and remove the `status.conditions` of an object by `type`,
//! the way apimachinery's `meta.SetStatusCondition` and its siblings do, and the schema of
//! that list for a custom resource.
//!
//! Conditions are the API's standard way to report state (`Ready`, `Progressing`,
//! `Degraded`, ...): at most one per `type`, each with a `status` (`True`, `False` or
//! `Unknown`), a CamelCase `reason`, a `message` for people, the `observedGeneration` it
//! was computed from, and a `lastTransitionTime` that says when the `status` last changed,
//! not when the condition was last written: [`set_condition`] keeps it while the status
//! stays the same, so "how long has this been `False`?" has an answer, and it tells whether
//! anything changed, so a reconcile writes the status only when it has to.
//!
//! ```
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
//! use rudder::conditions::{
//!     ConditionStatus, is_condition_true, new_condition, remove_condition, set_condition,
//! };
//!
//! let mut conditions: Vec<Condition> = Vec::new();
//! let generation = Some(3); // the object's metadata.generation
//! let ready = Condition {
//!     observed_generation: generation,
//!     ..new_condition("Ready", ConditionStatus::True, "PodRunning", "the pod is running")
//! };
//! assert!(set_condition(&mut conditions, ready.clone()), "added");
//! let since = conditions[0].last_transition_time.clone();
//! assert!(!set_condition(&mut conditions, ready), "the same again changes nothing");
//! assert_eq!(conditions[0].last_transition_time, since);
//! assert!(is_condition_true(&conditions, "Ready"));
//! assert!(remove_condition(&mut conditions, "Ready"));
//! ```
//!
//! In a reconciler, set the conditions on the status read from the cache and write it back
//! with [`Client::update_status`](crate::client::Client::update_status) when
//! [`set_condition`] says something changed: a replace, conditional on the resourceVersion
//! read, which also clears what the new status leaves out (a merge patch would not: see
//! [`Client::patch_status`](crate::client::Client::patch_status)).
//!
//! # In a custom resource's schema
//!
//! A `Vec<Condition>` in a `#[derive(CustomResource, JsonSchema)]` status takes its schema
//! from [`schema`] (feature `schemars`, on by default): the condition's fields with the
//! API's validation (`status` one of `True`, `False`, `Unknown`; `reason` CamelCase and not
//! empty; the lengths the API allows), and the list marked as a map keyed by `type`
//! (`x-kubernetes-list-type: map`, `x-kubernetes-list-map-keys: [type]`), so server-side
//! apply merges conditions by type, and the API server refuses two conditions of one type.
//! It needs no `JsonSchema` for k8s-openapi's types (their `schemars` feature, which costs
//! compile time across all of k8s-openapi, is for other fields of theirs in a schema).
//!
//! ```
//! # #[cfg(feature = "schemars")] {
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
//! pub struct WidgetStatus {
//!     /// The widget's conditions, one per type.
//!     // `default` makes the field optional in the schema; without it the API server
//!     // would refuse a status that has no conditions yet.
//!     #[serde(default, skip_serializing_if = "Vec::is_empty")]
//!     #[schemars(schema_with = "rudder::conditions::schema")]
//!     pub conditions: Vec<Condition>,
//! }
//! # }
//! ```

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The status of a condition: `True`, `False` or `Unknown` (the API's
/// `metav1.ConditionStatus`; [`Condition::status`] holds it as a string).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Whether the condition holds cannot be told (yet).
    Unknown,
}

impl ConditionStatus {
    /// The status as the API spells it: `"True"`, `"False"` or `"Unknown"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(holds: bool) -> Self {
        if holds { Self::True } else { Self::False }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A condition to give [`set_condition`]: `type_`, `status`, `reason` (CamelCase, not
/// empty) and `message`, without an `observedGeneration` (set it with struct update
/// syntax, as in the [module's example](self)) and with its `lastTransitionTime` unset, for
/// [`set_condition`] to fill.
pub fn new_condition(
    type_: impl Into<String>,
    status: ConditionStatus,
    reason: impl Into<String>,
    message: impl Into<String>,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.as_str().to_owned(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: None,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// Sets `condition` in `conditions`, by its `type`, and returns whether that changed
/// anything (apimachinery's `meta.SetStatusCondition`).
///
/// - A condition of that type already there takes the new `status`, `reason`, `message` and
///   `observedGeneration`. Its `lastTransitionTime` is kept if the status is the same, and
///   set to the given condition's if the status changed, or to now if the given one is
///   unset.
/// - Otherwise `condition` is appended, its `lastTransitionTime` set to now if unset.
///
/// A `lastTransitionTime` at the Unix epoch counts as unset (what [`new_condition`]
/// leaves, and `Timestamp`'s default).
pub fn set_condition(conditions: &mut Vec<Condition>, condition: Condition) -> bool {
    set_condition_at(conditions, condition, Timestamp::now())
}

/// The condition of type `type_` in `conditions`, if there is one
/// (`meta.FindStatusCondition`).
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Removes the condition of type `type_` from `conditions`, and returns whether there was
/// one (`meta.RemoveStatusCondition`).
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Whether the condition of type `type_` is there with status `True`
/// (`meta.IsStatusConditionTrue`).
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    has_status(conditions, type_, ConditionStatus::True)
}

/// Whether the condition of type `type_` is there with status `False`
/// (`meta.IsStatusConditionFalse`). A missing condition is neither true nor false.
pub fn is_condition_false(conditions: &[Condition], type_: &str) -> bool {
    has_status(conditions, type_, ConditionStatus::False)
}

/// The schema of a list of conditions, for a `Vec<Condition>` field of a custom resource:
/// `#[schemars(schema_with = "rudder::conditions::schema")]`, with `#[serde(default)]` so
/// that the field is optional (see the [module's docs](self)).
///
/// The list is a map keyed by `type` (`x-kubernetes-list-type: map`,
/// `x-kubernetes-list-map-keys: [type]`); each condition has the API's required fields and
/// validation (`metav1.Condition`'s).
#[cfg(feature = "schemars")]
#[cfg_attr(docsrs, doc(cfg(feature = "schemars")))]
pub fn schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "description": "Condition contains details for one aspect of the current state of this API Resource.",
            "type": "object",
            "properties": {
                "type": {
                    "description": "type of condition in CamelCase or in foo.example.com/CamelCase.",
                    "type": "string",
                    "maxLength": 316,
                    // A qualified name, optionally prefixed with a DNS subdomain and a slash.
                    "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                },
                "status": {
                    "description": "status of the condition, one of True, False, Unknown.",
                    "type": "string",
                    "enum": ["True", "False", "Unknown"],
                },
                "observedGeneration": {
                    "description": "observedGeneration represents the .metadata.generation that the condition was set based upon.",
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0,
                },
                "lastTransitionTime": {
                    "description": "lastTransitionTime is the last time the condition transitioned from one status to another.",
                    "type": "string",
                    "format": "date-time",
                },
                "reason": {
                    "description": "reason contains a programmatic identifier indicating the reason for the condition's last transition, in CamelCase.",
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 1024,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                },
                "message": {
                    "description": "message is a human readable message indicating details about the transition. This may be an empty string.",
                    "type": "string",
                    "maxLength": 32768,
                },
            },
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
        },
    })
}

/// [`set_condition`] with the time it takes as now, so that tests can fix it.
fn set_condition_at(conditions: &mut Vec<Condition>, condition: Condition, now: Timestamp) -> bool {
    let given = (condition.last_transition_time.0 != Timestamp::UNIX_EPOCH)
        .then(|| condition.last_transition_time.clone());
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == condition.type_) else {
        conditions.push(Condition {
            last_transition_time: given.unwrap_or(Time(now)),
            ..condition
        });
        return true;
    };
    let mut changed = false;
    if existing.status != condition.status {
        existing.status = condition.status;
        existing.last_transition_time = given.unwrap_or(Time(now));
        changed = true;
    }
    changed |= replace(&mut existing.reason, condition.reason);
    changed |= replace(&mut existing.message, condition.message);
    changed |= replace(
        &mut existing.observed_generation,
        condition.observed_generation,
    );
    changed
}

/// Puts `new` in `slot` if it differs, and says whether it did.
fn replace<T: PartialEq>(slot: &mut T, new: T) -> bool {
    if *slot == new {
        return false;
    }
    *slot = new;
    true
}

fn has_status(conditions: &[Condition], type_: &str, status: ConditionStatus) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == status.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed point in time, `seconds` after an arbitrary start.
    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn ready(status: ConditionStatus, reason: &str) -> Condition {
        new_condition("Ready", status, reason, "")
    }

    #[test]
    fn a_new_condition_is_appended_with_now_as_its_transition() {
        let mut conditions = vec![ready(ConditionStatus::True, "Up")];
        conditions[0].last_transition_time = Time(at(0));
        let synced = new_condition("Synced", ConditionStatus::False, "Pending", "waiting");
        assert!(set_condition_at(&mut conditions, synced, at(10)));
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[1].type_, "Synced");
        assert_eq!(conditions[1].status, "False");
        assert_eq!(conditions[1].message, "waiting");
        assert_eq!(conditions[1].last_transition_time, Time(at(10)));
        assert_eq!(conditions[0].last_transition_time, Time(at(0)), "untouched");
    }

    #[test]
    fn setting_the_same_status_twice_keeps_the_transition_time() {
        let mut conditions = Vec::new();
        assert!(set_condition_at(
            &mut conditions,
            ready(ConditionStatus::True, "Up"),
            at(0)
        ));
        assert!(!set_condition_at(
            &mut conditions,
            ready(ConditionStatus::True, "Up"),
            at(60)
        ));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, Time(at(0)));
    }

    #[test]
    fn reason_message_and_generation_change_without_a_transition() {
        let mut conditions = Vec::new();
        set_condition_at(&mut conditions, ready(ConditionStatus::True, "Up"), at(0));
        assert!(set_condition_at(
            &mut conditions,
            ready(ConditionStatus::True, "StillUp"),
            at(1)
        ));
        assert!(set_condition_at(
            &mut conditions,
            new_condition("Ready", ConditionStatus::True, "StillUp", "all good"),
            at(2)
        ));
        let observed = Condition {
            observed_generation: Some(4),
            ..new_condition("Ready", ConditionStatus::True, "StillUp", "all good")
        };
        assert!(set_condition_at(&mut conditions, observed.clone(), at(3)));
        assert!(!set_condition_at(&mut conditions, observed, at(4)));
        let c = &conditions[0];
        assert_eq!(
            (c.reason.as_str(), c.message.as_str(), c.observed_generation),
            ("StillUp", "all good", Some(4))
        );
        assert_eq!(
            c.last_transition_time,
            Time(at(0)),
            "the status never changed"
        );
    }

    #[test]
    fn a_status_change_is_a_transition_now() {
        let mut conditions = Vec::new();
        set_condition_at(&mut conditions, ready(ConditionStatus::True, "Up"), at(0));
        assert!(set_condition_at(
            &mut conditions,
            ready(ConditionStatus::False, "Down"),
            at(30)
        ));
        assert_eq!(conditions[0].status, "False");
        assert_eq!(conditions[0].reason, "Down");
        assert_eq!(conditions[0].last_transition_time, Time(at(30)));
    }

    #[test]
    fn a_given_transition_time_is_taken_only_with_a_transition() {
        let mut conditions = Vec::new();
        let given = |status, seconds| Condition {
            last_transition_time: Time(at(seconds)),
            ..ready(status, "Given")
        };
        set_condition_at(&mut conditions, given(ConditionStatus::True, 5), at(100));
        assert_eq!(
            conditions[0].last_transition_time,
            Time(at(5)),
            "new: given"
        );
        assert!(!set_condition_at(
            &mut conditions,
            given(ConditionStatus::True, 7),
            at(100)
        ));
        assert_eq!(
            conditions[0].last_transition_time,
            Time(at(5)),
            "no transition"
        );
        set_condition_at(&mut conditions, given(ConditionStatus::False, 9), at(100));
        assert_eq!(
            conditions[0].last_transition_time,
            Time(at(9)),
            "transition"
        );
    }

    #[test]
    fn find_remove_and_the_status_tests() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, ready(ConditionStatus::True, "Up"));
        set_condition(
            &mut conditions,
            new_condition("Degraded", ConditionStatus::False, "Fine", ""),
        );
        set_condition(
            &mut conditions,
            new_condition("Synced", ConditionStatus::Unknown, "Starting", ""),
        );
        assert_eq!(
            find_condition(&conditions, "Degraded").map(|c| c.reason.as_str()),
            Some("Fine")
        );
        assert!(find_condition(&conditions, "Missing").is_none());
        assert!(is_condition_true(&conditions, "Ready"));
        assert!(!is_condition_false(&conditions, "Ready"));
        assert!(is_condition_false(&conditions, "Degraded"));
        for neither in ["Synced", "Missing"] {
            assert!(!is_condition_true(&conditions, neither), "{neither}");
            assert!(!is_condition_false(&conditions, neither), "{neither}");
        }
        assert!(remove_condition(&mut conditions, "Degraded"));
        assert!(!remove_condition(&mut conditions, "Degraded"));
        let types: Vec<_> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "Synced"]);
    }

    #[test]
    fn statuses_are_spelled_as_the_api_does() {
        assert_eq!(ConditionStatus::from(true).to_string(), "True");
        assert_eq!(ConditionStatus::from(false).as_str(), "False");
        assert_eq!(ConditionStatus::Unknown.as_str(), "Unknown");
    }

    #[cfg(feature = "schemars")]
    #[test]
    fn the_schema_is_a_list_map_keyed_by_type() {
        let schema = schema(&mut schemars::SchemaGenerator::default());
        let value = schema.as_value();
        assert_eq!(value["type"], "array");
        assert_eq!(value["x-kubernetes-list-type"], "map");
        assert_eq!(
            value["x-kubernetes-list-map-keys"],
            serde_json::json!(["type"])
        );
        let required = value["items"]["required"].as_array().cloned();
        assert!(
            required
                .unwrap_or_default()
                .contains(&serde_json::json!("type")),
            "a map key must be required"
        );
    }
}
