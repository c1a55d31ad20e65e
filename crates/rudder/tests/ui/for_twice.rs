//! `for_` twice: a controller reconciles one type.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use rudder::manager::Manager;

fn declare(manager: &Manager) {
    let _ = rudder::new_controller(manager)
        .for_::<ConfigMap>()
        .for_::<Secret>();
}

fn main() {}
