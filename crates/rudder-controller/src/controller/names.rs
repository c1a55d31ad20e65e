//! The process-wide registry of controller names: a name is taken by `build` and given
//! back when the controller is dropped.

use rudder_core::sync::LockExt;
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

fn names() -> &'static Mutex<HashSet<String>> {
    static NAMES: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    NAMES.get_or_init(Mutex::default)
}

pub(super) fn register_name(name: &str) -> bool {
    names().lock_unpoisoned().insert(name.to_owned())
}

pub(super) fn unregister_name(name: &str) {
    names().lock_unpoisoned().remove(name);
}

/// The name a controller takes in the registry: its own, or `name@cluster` for a controller
/// serving one member cluster (`@` cannot appear in either, both being DNS names).
pub(super) fn registry_key(name: &str, cluster: Option<&str>) -> String {
    match cluster {
        Some(cluster) => format!("{name}@{cluster}"),
        None => name.to_owned(),
    }
}
