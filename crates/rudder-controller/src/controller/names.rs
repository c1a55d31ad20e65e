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
