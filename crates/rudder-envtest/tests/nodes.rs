//! With fake nodes on (kube-scheduler and KWOK): Pods are scheduled, run, and go away when
//! deleted, as on a cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use rudder_envtest::TestEnv;
use rudder_envtest::poll::eventually;

/// Scheduling and KWOK's stages take well under a second; allow for a loaded CI.
const WITHIN: Duration = Duration::from_secs(60);

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("registry.example/never-pulled:1".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

#[tokio::test]
async fn pods_are_scheduled_onto_fake_nodes_run_and_go_away_when_deleted() {
    let env = TestEnv::builder().nodes(2).start().await.unwrap();
    assert_eq!(env.nodes(), 2);
    let names: Vec<_> = env.pids().into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["etcd", "kube-apiserver", "kube-scheduler", "kwok"]);

    // Every node is Ready when `start` returns, and has the capacity KWOK gives it.
    let nodes: Api<Node> = Api::all(env.client().unwrap());
    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
    for node in &list.items {
        let status = node.status.as_ref().expect("a fake node has a status");
        let ready = status.conditions.as_ref().unwrap();
        assert!(
            ready
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
            "{ready:?}"
        );
        assert!(status.allocatable.as_ref().unwrap().contains_key("pods"));
    }

    let ns = env.namespace("pods-run").await.unwrap();
    let pods = ns.api::<Pod>();
    for i in 0..4 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}")))
            .await
            .unwrap();
    }
    for i in 0..4 {
        let name = format!("p{i}");
        let running = eventually(&format!("{name} Running"), WITHIN, async || {
            let p = pods.get(&name).await.ok()?;
            (phase(&p) == Some("Running")).then_some(p)
        })
        .await;
        let node = running.spec.as_ref().unwrap().node_name.clone().unwrap();
        assert!(node.starts_with("kwok-node-"), "{node}");
        let status = running.status.as_ref().unwrap();
        assert!(
            status.pod_ip.is_some(),
            "a running Pod has an IP: {status:?}"
        );
        let conditions = status.conditions.as_ref().unwrap();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
            "{conditions:?}"
        );
    }

    // A graceful delete only marks the Pod; the kubelet (KWOK here) finishes it.
    pods.delete("p0", &DeleteParams::default()).await.unwrap();
    eventually("p0 gone", WITHIN, async || {
        pods.get_opt("p0").await.unwrap().is_none().then_some(())
    })
    .await;
    env.stop().unwrap();
}
