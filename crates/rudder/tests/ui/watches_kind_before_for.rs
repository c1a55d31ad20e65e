//! `watches_kind` before `for_`.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use rudder::manager::Manager;
use rudder::prelude::EnqueueObject;

fn declare(manager: &Manager) {
    let _ = rudder::new_controller(manager)
        .watches_kind::<Secret, _>(EnqueueObject)
        .for_::<ConfigMap>();
}

fn main() {}
