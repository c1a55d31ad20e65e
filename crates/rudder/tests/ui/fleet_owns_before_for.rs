//! A fleet's controller keeps the single-cluster builder's order: `owns` before `for_` fails
//! with the same message.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use rudder::multicluster::Fleet;

fn declare(fleet: &Fleet) {
    let _ = fleet
        .new_controller()
        .owns::<Deployment>()
        .for_::<ConfigMap>();
}

fn main() {}
