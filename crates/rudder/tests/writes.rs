//! Writes against a real API server: status conditions in a custom resource (the schema of
//! `rudder::conditions`), status writes that clear what they leave out and one that does
//! not, and create-or-patch after the server's defaulting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::api::Api;
use kube::core::ObjectMeta;
use kube::{CustomResource, CustomResourceExt as _, ResourceExt as _};
use rudder::cache::Cache;
use rudder::client::{Client, Operation, create_or_patch, create_or_update};
use rudder::conditions::{
    ConditionStatus, find_condition, is_condition_false, new_condition, set_condition,
};
use rudder_envtest::TestNamespace;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// A widget of some size, whose status reports how it is doing.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "writes.rudder.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
struct WidgetSpec {
    size: i64,
}

/// As a status is usually written: empty fields left out.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
struct WidgetStatus {
    /// What went wrong last, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// The widget's conditions, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "rudder::conditions::schema")]
    conditions: Vec<Condition>,
}

/// Installs the Widget CRD once per test binary's control plane (applying it again is
/// harmless), and gives a namespace of its own.
async fn widgets(name: &str) -> TestNamespace {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace(name).await.unwrap();
    rudder::client::apply_crd(
        &env.client().unwrap(),
        &Widget::crd(),
        "writes-test",
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    ns
}

fn client(ns: &TestNamespace, token: &CancellationToken) -> Client {
    let cache = Cache::builder(ns.client())
        .default_namespace(ns.name())
        .build(token);
    Client::new(ns.client(), cache, "writes-test")
}

fn widget(ns: &TestNamespace, name: &str) -> Widget {
    let mut widget = Widget::new(name, WidgetSpec { size: 1 });
    widget.metadata.namespace = Some(ns.name().to_owned());
    widget
}

fn status(widget: &Widget) -> WidgetStatus {
    widget.status.clone().unwrap_or_default()
}

#[tokio::test]
async fn conditions_are_a_list_map_keyed_by_type_on_the_server() {
    let ns = widgets("conditions").await;
    // The stored CRD keeps the list's extensions: the server validates by them.
    let crds: Api<CustomResourceDefinition> = Api::all(ns.client());
    let crd = serde_json::to_value(crds.get("widgets.writes.rudder.dev").await.unwrap()).unwrap();
    let conditions = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        ["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map", "{conditions}");
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );

    let token = CancellationToken::new();
    let client = client(&ns, &token);
    let created = client.create(&widget(&ns, "w")).await.unwrap();
    // A status without conditions is valid: the field is optional.
    let mut next = created.clone();
    next.status = Some(WidgetStatus::default());
    let created = client.update_status(&next).await.unwrap();

    let mut next = created.clone();
    let mut written = status(&next);
    let ready = |status, reason: &str| Condition {
        observed_generation: created.metadata.generation,
        ..new_condition("Ready", status, reason, "")
    };
    assert!(set_condition(
        &mut written.conditions,
        ready(ConditionStatus::False, "Starting")
    ));
    next.status = Some(written);
    let first = client.update_status(&next).await.unwrap();
    let since = find_condition(&status(&first).conditions, "Ready")
        .unwrap()
        .last_transition_time
        .clone();

    // The same status again from what the server holds: nothing changes, nothing to write.
    let mut read = status(&first);
    assert!(!set_condition(
        &mut read.conditions,
        ready(ConditionStatus::False, "Starting")
    ));
    // A new reason is a change, but no transition: the time read back is kept.
    assert!(set_condition(
        &mut read.conditions,
        ready(ConditionStatus::False, "Pulling")
    ));
    let mut next = first.clone();
    next.status = Some(read);
    let second = client.update_status(&next).await.unwrap();
    let written = status(&second);
    assert!(is_condition_false(&written.conditions, "Ready"));
    let condition = find_condition(&written.conditions, "Ready").unwrap();
    assert_eq!(condition.reason, "Pulling");
    assert_eq!(condition.last_transition_time, since);

    // Two conditions of one type: the server refuses the list, as a map keyed by type.
    let mut duplicated = second.clone();
    let mut twice = status(&second);
    twice.conditions.push(ready(ConditionStatus::True, "Up"));
    twice.conditions[1].last_transition_time = since.clone();
    duplicated.status = Some(twice);
    let err = client.update_status(&duplicated).await.unwrap_err();
    assert_eq!(err.status_code(), Some(422), "{err}");
    // So is a status that is not one of the three.
    let mut invalid = second.clone();
    let mut maybe = status(&second);
    maybe.conditions[0].status = "Maybe".into();
    invalid.status = Some(maybe);
    let err = client.update_status(&invalid).await.unwrap_err();
    assert_eq!(err.status_code(), Some(422), "{err}");
    token.cancel();
}

#[tokio::test]
async fn update_status_clears_what_patch_status_leaves() {
    let ns = widgets("status-writes").await;
    let token = CancellationToken::new();
    let client = client(&ns, &token);
    let created = client.create(&widget(&ns, "w")).await.unwrap();
    let mut failing = WidgetStatus {
        message: Some("cannot pull the image".into()),
        ..WidgetStatus::default()
    };
    set_condition(
        &mut failing.conditions,
        new_condition("Ready", ConditionStatus::False, "ImagePullFailed", ""),
    );
    let written = client.patch_status(&created, &failing).await.unwrap();
    assert_eq!(status(&written).message, failing.message);
    assert_eq!(status(&written).conditions.len(), 1);

    // Recovered: no message, no condition. The merge patch is `{"status": {}}`: the server
    // keeps both.
    let recovered = WidgetStatus::default();
    let patched = client.patch_status(&written, &recovered).await.unwrap();
    let kept = status(&patched);
    assert_eq!(kept.message.as_deref(), Some("cannot pull the image"));
    assert_eq!(kept.conditions.len(), 1);
    assert_eq!(
        patched.resource_version(),
        written.resource_version(),
        "the patch was accepted, and changed nothing"
    );

    // The replace writes the status as it is: both are gone.
    let mut next = patched.clone();
    next.status = Some(recovered.clone());
    let replaced = client.update_status(&next).await.unwrap();
    assert_eq!(status(&replaced), recovered);
    let stored = ns.api::<Widget>().get("w").await.unwrap();
    assert_eq!(status(&stored), recovered);
    assert_eq!(stored.spec.size, 1, "the spec is not the status' to write");

    // Server-side apply removes what this manager applied before and leaves out now.
    let mut applied = widget(&ns, "w");
    applied.status = Some(WidgetStatus {
        message: Some("applied".into()),
        ..WidgetStatus::default()
    });
    let answer = client.apply_status(&applied).await.unwrap();
    assert_eq!(status(&answer).message.as_deref(), Some("applied"));
    applied.status = Some(WidgetStatus::default());
    let answer = client.apply_status(&applied).await.unwrap();
    assert_eq!(status(&answer), WidgetStatus::default());
    token.cancel();
}

/// A Deployment's mutation as a reconciler often writes one: the spec rebuilt from what it
/// wants, leaving out what the server defaults (`strategy`, `revisionHistoryLimit`, the
/// container's `terminationMessagePath`, `imagePullPolicy`, ...).
fn desired(replicas: i32) -> impl Fn(&mut Deployment) -> Result<(), rudder::client::ClientError> {
    move |deployment| {
        let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        deployment.spec = DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "web".into(),
                        image: Some("registry.k8s.io/pause:3.9".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        };
        Ok(())
    }
}

#[tokio::test]
async fn create_or_patch_compares_after_the_servers_defaults() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("defaults").await.unwrap();
    let deployments: Api<Deployment> = ns.api();

    let (created, op) = create_or_patch(&deployments, "web", desired(1))
        .await
        .unwrap();
    assert_eq!(op, Operation::Created);
    // The server filled in what the mutation leaves out, so the mutated object differs from
    // the one read, as JSON, every time.
    let spec = &created.spec;
    assert!(spec.strategy.is_some());
    let container = &spec.template.spec.as_ref().unwrap().containers[0];
    assert!(container.termination_message_path.is_some());
    let mut mutated = created.clone();
    desired(1)(&mut mutated).unwrap();
    assert_ne!(
        serde_json::to_value(&mutated).unwrap(),
        serde_json::to_value(&created).unwrap()
    );

    for _ in 0..2 {
        let (again, op) = create_or_patch(&deployments, "web", desired(1))
            .await
            .unwrap();
        assert_eq!(op, Operation::Unchanged);
        assert_eq!(again.resource_version(), created.resource_version());
        let (again, op) = create_or_update(&deployments, "web", desired(1))
            .await
            .unwrap();
        assert_eq!(op, Operation::Unchanged);
        assert_eq!(again.resource_version(), created.resource_version());
    }
    let stored = deployments.get("web").await.unwrap();
    assert_eq!(stored.resource_version(), created.resource_version());

    // A change is still one.
    let (scaled, op) = create_or_patch(&deployments, "web", desired(2))
        .await
        .unwrap();
    assert_eq!(op, Operation::Updated);
    assert_ne!(scaled.resource_version(), created.resource_version());
    assert_eq!(scaled.spec.replicas, Some(2));
    let (back, op) = create_or_update(&deployments, "web", desired(1))
        .await
        .unwrap();
    assert_eq!(op, Operation::Updated);
    assert_eq!(back.spec.replicas, Some(1));
    assert!(back.spec.strategy.is_some(), "defaulted again");
}
