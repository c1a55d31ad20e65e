//! Server features that Kubernetes releases after 1.20 turn on by default, checked live through
//! kube-client against the test control plane: streaming lists, CRD selectable fields,
//! ValidatingAdmissionPolicy and comparable resourceVersions. Each test asserts its feature on
//! servers from the release where it is on by default and says what it skipped on older ones.
// Skips are reported on stderr, where the test harness shows them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::Status;
use rudder_envtest::TestEnv;
use rudder_envtest::poll::eventually;
use serde_json::json;

/// The annotation a streaming list's closing bookmark carries.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// How long a policy may take to be picked up by the API server's admission plugin, which
/// loads policies and bindings from informers.
const POLICY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a single watch in these tests may take to deliver what it is asked for.
const WATCH_TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn streaming_watch_sends_existing_objects_then_the_initial_events_end_bookmark() {
    let env = TestEnv::builder().shared().await.unwrap();
    let streaming = on_by_default(env, 34, "streaming lists (sendInitialEvents)");
    let ns = env.namespace("streaming_watch").await.unwrap();
    let cms = ns.api::<ConfigMap>();
    // The label keeps objects other components put in the namespace out of the comparison.
    let label = "envtest.rudder.rs/streamed=yes";
    let mut created = BTreeMap::new();
    for name in ["first", "second", "third"] {
        let cm = cms
            .create(&PostParams::default(), &labelled_config_map(name))
            .await
            .unwrap();
        created.insert(name.to_owned(), cm.metadata.resource_version.unwrap());
    }

    // resourceVersion "" with sendInitialEvents: the current state, streamed, then a bookmark.
    let params = WatchParams::streaming_lists().labels(label).timeout(60);
    assert!(
        params.bookmarks,
        "a streaming list needs allowWatchBookmarks"
    );
    let mut events = match cms.watch(&params, "").await {
        Ok(events) => events.boxed(),
        // 1.33 ships the WatchList gate off by default; such a server refuses the request
        // rather than ignoring the parameter, so a client can tell and fall back to a list.
        Err(kube::Error::Api(status)) if !streaming => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(status.message.contains("sendInitialEvents"), "{status:?}");
            return;
        }
        Err(e) => panic!("a streaming watch: {e}"),
    };
    if !streaming {
        eprintln!("this server streams though it need not; checking it as a newer one");
    }

    let mut added = BTreeMap::new();
    let end = tokio::time::timeout(WATCH_TIMEOUT, async {
        while let Some(event) = events.try_next().await.unwrap() {
            match event {
                WatchEvent::Added(cm) => {
                    let name = cm.metadata.name.unwrap();
                    added.insert(name, cm.metadata.resource_version.unwrap());
                }
                WatchEvent::Bookmark(bookmark)
                    if bookmark.metadata.annotations.get(INITIAL_EVENTS_END)
                        == Some(&"true".to_owned()) =>
                {
                    return bookmark;
                }
                // A bookmark without the annotation is an ordinary progress bookmark.
                WatchEvent::Bookmark(_) => {}
                other => panic!("unexpected event before the initial events ended: {other:?}"),
            }
        }
        panic!("the watch ended before the {INITIAL_EVENTS_END} bookmark; added {added:?}");
    })
    .await
    .expect("the initial-events-end bookmark within the timeout");

    assert_eq!(
        added, created,
        "every object created before the watch, at its resourceVersion, arrives as ADDED \
         before the closing bookmark"
    );
    // The bookmark says which state the initial events describe: one that has every object.
    let bookmark_rv = &end.metadata.resource_version;
    for (name, rv) in &created {
        assert_ne!(
            compare_rv(bookmark_rv, rv),
            Ordering::Less,
            "bookmark {bookmark_rv} is older than {name} at {rv}"
        );
    }

    // After the initial events the stream is an ordinary watch from the bookmark's state.
    cms.create(&PostParams::default(), &labelled_config_map("after"))
        .await
        .unwrap();
    let next = tokio::time::timeout(WATCH_TIMEOUT, async {
        loop {
            match events.try_next().await.unwrap() {
                Some(WatchEvent::Bookmark(_)) => {}
                Some(event) => return event,
                None => panic!("the watch ended before the object created after the bookmark"),
            }
        }
    })
    .await
    .expect("the object created after the bookmark within the timeout");
    match next {
        WatchEvent::Added(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("after")),
        other => panic!("expected ADDED for the object created after the bookmark: {other:?}"),
    }
}

#[tokio::test]
async fn crd_selectable_field_answers_a_field_selector_and_others_are_refused() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("selectable_fields").await.unwrap();
    let selectable = on_by_default(env, 32, "CRD selectableFields");
    // Older servers know no selectableFields; the CRD is the same without them, so the
    // refusal of an unselectable field is checked there too.
    let selectable_fields = if selectable {
        "\n    selectableFields:\n    - jsonPath: .spec.color"
    } else {
        ""
    };
    env.install_crd_yaml(&format!(
        "
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: paints.features.envtest.rudder.rs
spec:
  group: features.envtest.rudder.rs
  names: {{kind: Paint, plural: paints, singular: paint, listKind: PaintList}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true{selectable_fields}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              color: {{type: string}}
              size: {{type: integer}}
"
    ))
    .await
    .unwrap();
    let gvk = GroupVersionKind::gvk("features.envtest.rudder.rs", "v1", "Paint");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "paints");
    let paints: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &resource);
    for (name, color) in [("red", "red"), ("sky", "blue"), ("sea", "blue")] {
        let paint: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "features.envtest.rudder.rs/v1",
            "kind": "Paint",
            "metadata": {"name": name},
            "spec": {"color": color, "size": 3},
        }))
        .unwrap();
        paints.create(&PostParams::default(), &paint).await.unwrap();
    }

    // A field no version declares selectable is refused, as for any CRD field but the name
    // and namespace.
    match paints
        .list(&ListParams::default().fields("spec.size=3"))
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 400, "{status:?}"),
        other => panic!("a selector on spec.size must be refused with 400: {other:?}"),
    }
    if !selectable {
        return;
    }

    let names = async |selector: &str| -> BTreeSet<String> {
        paints
            .list(&ListParams::default().fields(selector))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect()
    };
    assert_eq!(names("spec.color=blue").await, set(["sky", "sea"]));
    assert_eq!(names("spec.color!=blue").await, set(["red"]));
    assert_eq!(
        names("spec.color=blue,metadata.name=sea").await,
        set(["sea"])
    );

    // The selector reads the stored object, so a change of color moves it between answers.
    paints
        .patch(
            "red",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"color": "blue"}})),
        )
        .await
        .unwrap();
    assert_eq!(names("spec.color=blue").await, set(["red", "sky", "sea"]));
    assert_eq!(names("spec.color!=blue").await, BTreeSet::new());
}

#[tokio::test]
async fn validating_admission_policy_denies_violating_config_maps_in_its_namespace() {
    let env = TestEnv::builder().shared().await.unwrap();
    if !on_by_default(env, 30, "ValidatingAdmissionPolicy") {
        return;
    }
    let ns = env.namespace("admission_policy").await.unwrap();
    let client = ns.client();
    let cms = ns.api::<ConfigMap>();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    // Both objects are cluster-scoped: the namespace in their names keeps them apart from
    // other tests', and the binding's namespaceSelector keeps them from judging other tests'
    // ConfigMaps even if this test fails before it removes them.
    let name = format!("at-most-two-keys-{}", ns.name());
    let message = "a ConfigMap here holds at most two keys";
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["configmaps"],
            }]},
            "validations": [{
                "expression": "!has(object.data) || size(object.data) <= 2",
                "message": message,
            }],
        },
    }))
    .unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": ns.name(),
            }}},
        },
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    let too_many = config_map_with_keys("too-many", 3);
    // Dry runs go through admission without storing anything, so polling with them leaves
    // nothing behind while the policy is not yet enforced.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let refusal = eventually(
        "the policy to be enforced",
        POLICY_TIMEOUT,
        async || match cms.create(&dry_run, &too_many).await {
            Ok(_) => None,
            Err(kube::Error::Api(status)) => Some(*status),
            Err(e) => panic!("dry-run create failed without an answer: {e}"),
        },
    )
    .await;
    assert_denied_by_policy(&refusal, message);

    // Enforced for real creates and updates too, and only against violations.
    match cms.create(&PostParams::default(), &too_many).await {
        Err(kube::Error::Api(status)) => assert_denied_by_policy(&status, message),
        other => panic!("a ConfigMap with three keys must be refused: {other:?}"),
    }
    let fine = cms
        .create(&PostParams::default(), &config_map_with_keys("fine", 2))
        .await
        .unwrap();
    let mut grown = fine.clone();
    grown.data = config_map_with_keys("fine", 3).data;
    match cms.replace("fine", &PostParams::default(), &grown).await {
        Err(kube::Error::Api(status)) => assert_denied_by_policy(&status, message),
        other => panic!("an update to three keys must be refused: {other:?}"),
    }

    bindings
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    policies
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    // Without its binding the policy judges nothing, once the admission plugin has seen the
    // deletion.
    eventually("the policy to be lifted", POLICY_TIMEOUT, async || {
        cms.create(&dry_run, &too_many).await.ok()
    })
    .await;
}

#[tokio::test]
async fn resource_versions_of_successive_writes_compare_in_write_order() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("comparable_rvs").await.unwrap();
    let cms = ns.api::<ConfigMap>();
    let secrets = ns.api::<Secret>();

    // Writes across two objects of two kinds, each one's resourceVersion as it returns it.
    let mut writes: Vec<(&str, String)> = Vec::new();
    let rv = |meta: &ObjectMeta| meta.resource_version.clone().unwrap();
    let cm = cms
        .create(&PostParams::default(), &config_map_with_keys("rv", 1))
        .await
        .unwrap();
    writes.push(("create ConfigMap", rv(&cm.metadata)));
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("rv".into()),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([("k".into(), "v".into())])),
        ..Secret::default()
    };
    let secret = secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    writes.push(("create Secret", rv(&secret.metadata)));
    let mut changed = cm.clone();
    changed.data = config_map_with_keys("rv", 2).data;
    let cm = cms
        .replace("rv", &PostParams::default(), &changed)
        .await
        .unwrap();
    writes.push(("update ConfigMap", rv(&cm.metadata)));
    let patch = Patch::Merge(json!({"metadata": {"labels": {"patched": "yes"}}}));
    let secret = secrets
        .patch("rv", &PatchParams::default(), &patch)
        .await
        .unwrap();
    writes.push(("patch Secret", rv(&secret.metadata)));
    let cm = cms
        .patch("rv", &PatchParams::default(), &patch)
        .await
        .unwrap();
    writes.push(("patch ConfigMap", rv(&cm.metadata)));
    // A Secret's delete answers with a Status, which carries no resourceVersion; the
    // deletion's own version is the one its DELETED event carries, so watch for it.
    let mut secret_events = secrets
        .watch(&WatchParams::default(), &rv(&secret.metadata))
        .await
        .unwrap()
        .boxed();
    secrets
        .delete("rv", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = tokio::time::timeout(WATCH_TIMEOUT, async {
        loop {
            match secret_events.try_next().await.unwrap() {
                Some(WatchEvent::Deleted(secret)) => return secret,
                Some(WatchEvent::Bookmark(_)) => {}
                other => panic!("expected the Secret's DELETED event: {other:?}"),
            }
        }
    })
    .await
    .expect("the Secret's DELETED event within the timeout");
    writes.push(("delete Secret", rv(&deleted.metadata)));
    let list = cms.list(&ListParams::default()).await.unwrap();
    let list_rv = list.metadata.resource_version.clone().unwrap();

    if !on_by_default(env, 35, "comparable resourceVersions") {
        // Older servers promise only opaque strings; distinct writes still get distinct ones.
        let distinct: BTreeSet<_> = writes.iter().map(|(_, rv)| rv).collect();
        assert_eq!(distinct.len(), writes.len(), "{writes:?}");
        return;
    }
    let answers = writes.iter().map(|(write, rv)| (*write, rv.as_str()));
    for (answer, rv) in answers.chain([("list ConfigMaps", list_rv.as_str())]) {
        assert!(
            is_comparable_rv(rv),
            "{answer} returned resourceVersion {rv:?}, not a decimal integer without leading zeros"
        );
    }
    for pair in writes.windows(2) {
        let ((earlier, a), (later, b)) = (&pair[0], &pair[1]);
        assert_eq!(
            compare_rv(b, a),
            Ordering::Greater,
            "{later} ({b}) came after {earlier} ({a})"
        );
    }
    // A list describes one state, no older than anything in it nor than a write that
    // finished before it was asked for.
    for item in &list.items {
        let item_rv = rv(&item.metadata);
        assert_ne!(
            compare_rv(&list_rv, &item_rv),
            Ordering::Less,
            "list at {list_rv} holds {:?} at {item_rv}",
            item.metadata.name
        );
    }
    let (last, last_rv) = writes.last().unwrap();
    assert_ne!(
        compare_rv(&list_rv, last_rv),
        Ordering::Less,
        "list at {list_rv} is older than {last} at {last_rv}"
    );
}

#[test]
fn resource_versions_compare_as_integers_of_any_length() {
    assert_eq!(compare_rv("10", "9"), Ordering::Greater);
    assert_eq!(compare_rv("99", "100"), Ordering::Less);
    assert_eq!(compare_rv("123", "124"), Ordering::Less);
    assert_eq!(compare_rv("42", "42"), Ordering::Equal);
    assert!(is_comparable_rv("1"));
    assert!(is_comparable_rv("18446744073709551616"));
    assert!(!is_comparable_rv(""));
    assert!(!is_comparable_rv("0"));
    assert!(!is_comparable_rv("012"));
    assert!(!is_comparable_rv("12a"));
    assert!(!is_comparable_rv("-3"));
}

/// Whether the feature is on by default on this server (from `1.<minor>`); if not, says what
/// the test skips.
fn on_by_default(env: &TestEnv, minor: u32, feature: &str) -> bool {
    let version = env.version();
    let on = (version.major, version.minor) >= (1, minor);
    if !on {
        eprintln!(
            "skipped: {feature} is on by default from Kubernetes 1.{minor}; this server is {version}"
        );
    }
    on
}

/// Whether `rv` has the form KEP-5504 promises: a positive decimal integer without leading
/// zeros.
fn is_comparable_rv(rv: &str) -> bool {
    !rv.is_empty() && !rv.starts_with('0') && rv.bytes().all(|b| b.is_ascii_digit())
}

/// Orders two comparable resourceVersions as the integers they are, whatever their size: a
/// longer one is greater, and among equal lengths the digits decide.
fn compare_rv(a: &str, b: &str) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn labelled_config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(
                "envtest.rudder.rs/streamed".into(),
                "yes".into(),
            )])),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

fn config_map_with_keys(name: &str, keys: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some((0..keys).map(|i| (format!("k{i}"), "v".into())).collect()),
        ..ConfigMap::default()
    }
}

fn assert_denied_by_policy(status: &Status, message: &str) {
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains(message),
        "the refusal quotes the policy's message: {status:?}"
    );
}

fn set<const N: usize>(names: [&str; N]) -> BTreeSet<String> {
    names.into_iter().map(str::to_owned).collect()
}
