//! `owns` before `for_`: the builder has no primary type to own anything yet.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use rudder::manager::Manager;

fn declare(manager: &Manager) {
    let _ = rudder::new_controller(manager)
        .owns::<Deployment>()
        .for_::<ConfigMap>();
}

fn main() {}
