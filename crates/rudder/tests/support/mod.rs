//! What the facade's and rudder-fleet's integration tests share (rudder-fleet's include this
//! module by its path): ConfigMaps to shard, a manager per replica, the
//! ring's configuration with short Lease timings, running a manager, a defaulter and a
//! validator, a plain HTTP GET, an object's field managers, [`gizmo`], a kind in two
//! versions for the conversion tests, and [`go_module`], CRDs from a Go module.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(dead_code, clippy::unwrap_used)]

pub(crate) mod gizmo;
pub(crate) mod go_module;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt as _;
use kube::api::{Api, PostParams};
use kube::core::admission::AdmissionRequest;
use kube::core::{DynamicObject, ObjectMeta};
use rudder::lease::sharding::ShardingConfig;
use rudder::prelude::*;
use rudder::webhook::admission::{Defaulter, Denial, Validator, Warnings};
use rudder_envtest::TestNamespace;
use tokio_util::sync::CancellationToken;

/// Creates a ConfigMap of each name in `ns`, with `payload` bytes of data when not 0.
pub(crate) async fn create_config_maps(ns: &TestNamespace, names: &[String], payload: usize) {
    let api: Api<ConfigMap> = ns.api();
    for name in names {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            data: (payload > 0).then(|| [("payload".to_owned(), "x".repeat(payload))].into()),
            ..ConfigMap::default()
        };
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
}

/// A replica's manager: no probe or metrics server, its cache on `ns`.
pub(crate) fn manager(ns: &TestNamespace) -> Arc<Manager> {
    let namespace = ns.name().to_owned();
    Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(None)
            .metrics_address(None)
            .cache(move |c| c.default_namespace(namespace))
            .build()
            .unwrap(),
    )
}

/// Replica `who` of the ring `ring` in `ns`, with `shards` shards and Leases of 3 s (renew
/// deadline 2 s, retry 500 ms).
pub(crate) fn ring(ns: &TestNamespace, ring: &str, who: &str, shards: usize) -> ShardingConfig {
    ShardingConfig::new(ns.name(), ring)
        .with_identity(who)
        .with_shards(shards)
        .with_lease_duration(Duration::from_secs(3))
        .with_renew_deadline(Duration::from_secs(2))
        .with_retry_period(Duration::from_millis(500))
}

/// A running manager: its stop and its task.
pub(crate) type Running = (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), rudder::manager::Error>>,
);

/// Starts `manager` on a task of its own.
pub(crate) fn start(manager: &Arc<Manager>) -> Running {
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (manager, stop) = (Arc::clone(manager), stop.clone());
        async move { manager.start(stop).await }
    });
    (stop, task)
}

/// A plain HTTP/1.0 GET: (status, body); status 0 when nothing answers.
pub(crate) async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    rudder_envtest::http::get(addr, path)
        .await
        .map_or((0, String::new()), |answer| (answer.status, answer.body))
}

/// The field managers recorded in an object's `managedFields`.
pub(crate) fn field_managers(meta: &ObjectMeta) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect()
}

/// What [`Rules`] answers a ConfigMap named `forbidden`: finding it in a refusal proves the
/// API server called the webhook.
pub(crate) const DENIAL: &str = "forbidden is not a name for a ConfigMap";

/// Refuses ConfigMaps named `forbidden`, and updates that set `value=bad`; warns about
/// ConfigMaps named `warn-me`.
pub(crate) struct Rules;

impl Validator<ConfigMap> for Rules {
    async fn validate_create(
        &self,
        cm: &ConfigMap,
        _: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        match cm.name_any().as_str() {
            "forbidden" => Err(Denial::new(DENIAL)),
            "warn-me" => Ok(vec!["warn-me is a questionable name".into()]),
            _ => Ok(Vec::new()),
        }
    }

    async fn validate_update(
        &self,
        _old: &ConfigMap,
        new: &ConfigMap,
        _: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        let bad = new
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(String::as_str);
        if bad == Some("bad") {
            return Err(Denial::new("value may not be bad"));
        }
        Ok(Vec::new())
    }
}

/// Labels every ConfigMap `defaulted=yes`.
pub(crate) struct Label;

impl Defaulter<ConfigMap> for Label {
    async fn default(
        &self,
        cm: &mut ConfigMap,
        _: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        cm.labels_mut().insert("defaulted".into(), "yes".into());
        Ok(Vec::new())
    }
}
