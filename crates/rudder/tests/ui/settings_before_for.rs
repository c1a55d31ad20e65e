//! The builder's other methods before `for_`, one function each (the compiler reports one
//! such error per function).

use k8s_openapi::api::core::v1::Secret;
use rudder::controller::Options as ControllerOptions;
use rudder::manager::Manager;
use rudder::handler::{GenerationChanged, Kind};
use rudder::lease::sharding::ShardingConfig;
use rudder::prelude::EnqueueObject;
use rudder::manager::rbac::Permissions;

fn owns_with(manager: &Manager) {
    let _ = rudder::new_controller(manager).owns_with::<Secret>(GenerationChanged);
}

fn permissions(manager: &Manager) {
    let _ = rudder::new_controller(manager).permissions(Permissions::new());
}

fn watches_kind_with(manager: &Manager) {
    let _ = rudder::new_controller(manager)
        .watches_kind_with::<Secret, _>(EnqueueObject, GenerationChanged);
}

fn watches(manager: &Manager, kind: Kind<Secret>) {
    let _ = rudder::new_controller(manager).watches(kind, EnqueueObject);
}

fn watches_with(manager: &Manager, kind: Kind<Secret>) {
    let _ = rudder::new_controller(manager).watches_with(kind, EnqueueObject, GenerationChanged);
}

fn watches_raw(manager: &Manager, kind: Kind<Secret>) {
    let _ = rudder::new_controller(manager).watches_raw(kind, EnqueueObject);
}

fn event_filter(manager: &Manager) {
    let _ = rudder::new_controller(manager).event_filter(GenerationChanged);
}

fn named(manager: &Manager) {
    let _ = rudder::new_controller(manager).named("mirror");
}

fn with_options(manager: &Manager) {
    let _ = rudder::new_controller(manager).with_options(ControllerOptions::new());
}

fn sharded(manager: &Manager, config: ShardingConfig) {
    let _ = rudder::new_controller(manager).sharded(config);
}

fn main() {}
