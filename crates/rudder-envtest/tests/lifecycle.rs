//! A control plane's whole life: start, use (namespaces, ConfigMaps, server-side apply, watch,
//! CRDs and custom objects), stop, and nothing left behind, also after a panic.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use rudder_envtest::TestEnv;
use rudder_envtest::poll::until;

const WIDGET_CRD: &str = "
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.envtest.rudder.rs
spec:
  group: envtest.rudder.rs
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
";

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([("key".to_owned(), value.to_owned())].into()),
        ..Default::default()
    }
}

/// Whether `pid` is a live process. A zombie (killed, not yet reaped by whatever adopted it)
/// counts as gone: it runs nothing and holds no port.
fn proc_exists(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_none_or(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn starts_serves_and_stops_leaving_nothing_behind() {
    let env = TestEnv::start().await.unwrap();
    assert!(env.version().minor >= 20, "{}", env.version());
    let client = env.client().unwrap();
    let info = env.server_version().await.unwrap();
    assert_eq!(info.git_version, env.version().text);
    eprintln!(
        "kube-apiserver {} started in {:?}",
        info.git_version,
        env.started_in()
    );

    // Namespace and ConfigMap.
    let ns = env.namespace("lifecycle").await.unwrap();
    let cms = ns.api::<ConfigMap>();
    cms.create(&PostParams::default(), &config_map("one", "a"))
        .await
        .unwrap();

    // Watch it, then change it by server-side apply and see the change arrive.
    let stream = cms
        .watch(&WatchParams::default().fields("metadata.name=one"), "0")
        .await
        .unwrap();
    let mut stream = stream.boxed();
    let applied = cms
        .patch(
            "one",
            &PatchParams::apply("envtest-test").force(),
            &Patch::Apply(&config_map("one", "b")),
        )
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap()["key"], "b");
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = stream.try_next().await.unwrap() {
            if let WatchEvent::Modified(cm) = event
                && cm.data.as_ref().unwrap()["key"] == "b"
            {
                return cm;
            }
        }
        panic!("watch ended");
    })
    .await
    .expect("the watch reports the applied change");
    assert_eq!(seen.metadata.name.as_deref(), Some("one"));

    // A CRD from YAML, usable at once.
    env.install_crd_yaml(WIDGET_CRD).await.unwrap();
    let gvk = GroupVersionKind::gvk("envtest.rudder.rs", "v1", "Widget");
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns.name(), &ApiResource::from_gvk(&gvk));
    let mut widget = DynamicObject::new("w", &ApiResource::from_gvk(&gvk));
    widget.data = serde_json::json!({ "spec": { "size": 3 } });
    let created = widgets
        .create(&PostParams::default(), &widget)
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["size"], 3);
    // Installing it again is harmless.
    env.install_crd_yaml(WIDGET_CRD).await.unwrap();

    // A written kubeconfig works for another client.
    let copy = std::env::temp_dir().join(format!("envtest-kubeconfig-{}", std::process::id()));
    env.write_kubeconfig(&copy).unwrap();
    assert!(
        std::fs::read_to_string(&copy)
            .unwrap()
            .contains("current-context: envtest")
    );
    std::fs::remove_file(&copy).unwrap();

    let pids = env.pids();
    assert_eq!(
        pids.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        ["etcd", "kube-apiserver"]
    );
    let dir = env.dir().to_owned();
    assert!(dir.join("logs/kube-apiserver.log").exists());
    env.stop().unwrap();
    for (name, pid) in pids {
        assert!(!proc_exists(pid), "{name} ({pid}) still runs");
    }
    assert!(!dir.exists(), "{} still exists", dir.display());
}

#[tokio::test]
async fn two_control_planes_in_one_process_do_not_collide() {
    // B also installs a CRD while starting; A must not see it.
    let crds = rudder_envtest::crds_from_yaml(WIDGET_CRD).unwrap();
    let (a, b) = tokio::join!(TestEnv::start(), TestEnv::builder().crds(crds).start());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.dir(), b.dir());
    assert_ne!(a.config().cluster_url, b.config().cluster_url);

    let (ca, cb) = (a.client().unwrap(), b.client().unwrap());
    let widgets = "envtest.rudder.rs/v1";
    assert!(cb.list_api_group_resources(widgets).await.is_ok());
    assert!(ca.list_api_group_resources(widgets).await.is_err());
    let in_a: Api<ConfigMap> = Api::namespaced(ca.clone(), "default");
    in_a.create(&PostParams::default(), &config_map("only-in-a", "x"))
        .await
        .unwrap();
    let in_b: Api<ConfigMap> = Api::namespaced(cb.clone(), "default");
    assert!(in_b.get_opt("only-in-a").await.unwrap().is_none());
    // Same name on both sides is fine: separate etcds.
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("same".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    for c in [ca, cb] {
        Api::<Namespace>::all(c)
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    let pids: Vec<u32> = a.pids().into_iter().chain(b.pids()).map(|p| p.1).collect();
    drop(a);
    drop(b);
    assert!(pids.iter().all(|p| !proc_exists(*p)));
}

#[tokio::test]
async fn a_panicking_test_leaves_no_process_behind() {
    let (tx, rx) = std::sync::mpsc::channel();
    let result = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let env = TestEnv::start().await.unwrap();
            tx.send((env.pids(), env.dir().to_owned())).unwrap();
            panic!("a test failing with a control plane running");
        });
    })
    .join();
    assert!(result.is_err());
    let (pids, dir) = rx.recv().unwrap();
    until("the processes are gone", Duration::from_secs(10), || {
        pids.iter().all(|(_, p)| !proc_exists(*p))
    })
    .await;
    assert!(!dir.exists());
}

/// Run as a child process by `a_killed_test_process_leaves_no_process_behind`: starts a
/// control plane, reports it, and waits to be killed. Does nothing in a normal run.
#[tokio::test]
async fn child_that_gets_killed() {
    if std::env::var_os("RUDDER_ENVTEST_TEST_CHILD").is_none() {
        return;
    }
    let env = TestEnv::start().await.unwrap();
    let pids: Vec<String> = env.pids().iter().map(|p| p.1.to_string()).collect();
    println!("CHILD {} {}", env.dir().display(), pids.join(" "));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
}

#[tokio::test]
async fn a_killed_test_process_leaves_no_process_behind() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_that_gets_killed", "--nocapture"])
        .env("RUDDER_ENVTEST_TEST_CHILD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let report = tokio::task::spawn_blocking(move || {
        stdout
            .lines()
            .map(Result::unwrap)
            .find(|l| l.starts_with("CHILD "))
            .expect("the child reports its control plane")
    })
    .await
    .unwrap();
    let mut words = report.split_whitespace().skip(1);
    let dir = std::path::PathBuf::from(words.next().unwrap());
    let pids: Vec<u32> = words.map(|w| w.parse().unwrap()).collect();
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|p| proc_exists(*p)));

    child.kill().unwrap(); // SIGKILL: no destructor runs.
    child.wait().unwrap();
    until("the watchdog cleaned up", Duration::from_secs(10), || {
        pids.iter().all(|p| !proc_exists(*p)) && !dir.exists()
    })
    .await;
}

/// An API server stopped and started again: requests fail while it is down, and it comes
/// back on the same address with the data etcd kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_stops_and_starts_again_with_its_data() {
    let mut env = TestEnv::start().await.unwrap();
    let client = env.client().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("kept".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();

    env.stop_apiserver().unwrap();
    let down = tokio::time::timeout(Duration::from_secs(10), api.get("kept")).await;
    assert!(
        matches!(down, Ok(Err(_)) | Err(_)),
        "a stopped API server answered: {down:?}"
    );

    env.start_apiserver().await.unwrap();
    // The same client, on the same address, reads what etcd kept.
    assert_eq!(
        api.get("kept").await.unwrap().metadata.name.as_deref(),
        Some("kept")
    );
    // Starting a running server again does nothing.
    env.start_apiserver().await.unwrap();
    env.stop().unwrap();
}
