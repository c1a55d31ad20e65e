//! The decoders against a real API server: realistic objects of many built-in kinds (and the
//! objects the server makes itself: bootstrap RBAC, flow control, the `kubernetes` Service,
//! identity Leases), each read once as JSON and once as protobuf; the protobuf decoded with
//! `decoder::<K>()` must equal what serde_json makes of the JSON. Lists too, through
//! `list`, and a watch's frames through `watch_event`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]
#![recursion_limit = "256"]

use std::any::TypeId;
use std::fmt::Debug;
use std::time::Duration;

use http::Request;
use k8s_openapi::api::{
    admissionregistration::v1 as admission, apps::v1 as apps, autoscaling::v2 as autoscaling,
    batch::v1 as batch, coordination::v1 as coordination, core::v1 as core,
    discovery::v1 as discovery, events::v1 as events, flowcontrol::v1 as flowcontrol,
    networking::v1 as networking, node::v1 as node, policy::v1 as policy, rbac::v1 as rbac,
    scheduling::v1 as scheduling, storage::v1 as storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::{NamespaceResourceScope, Resource};
use rudder_envtest::TestEnv;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const JSON: &str = "application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

struct Ctx {
    client: kube::Client,
    ns: String,
    failures: Vec<String>,
    kinds: Vec<String>,
    objects: usize,
}

fn is_namespaced<K: Resource>() -> bool
where
    K::Scope: 'static,
{
    TypeId::of::<K::Scope>() == TypeId::of::<NamespaceResourceScope>()
}

fn collection<K: Resource>(ns: Option<&str>) -> String
where
    K::Scope: 'static,
{
    let base = if K::GROUP.is_empty() {
        format!("/api/{}", K::VERSION)
    } else {
        format!("/apis/{}/{}", K::GROUP, K::VERSION)
    };
    match ns {
        Some(ns) if is_namespaced::<K>() => {
            format!("{base}/namespaces/{ns}/{}", K::URL_PATH_SEGMENT)
        }
        _ => format!("{base}/{}", K::URL_PATH_SEGMENT),
    }
}

impl Ctx {
    async fn get(&self, url: &str, accept: &str) -> Vec<u8> {
        let request = Request::get(url)
            .header("accept", accept)
            .body(Vec::new())
            .unwrap();
        let response = self.client.send(request.map(Into::into)).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect_bytes().await.unwrap().to_vec();
        assert!(
            status.is_success(),
            "GET {url} ({accept}): {status} {}",
            String::from_utf8_lossy(&body)
        );
        body
    }

    /// With `RUDDER_PROTOBUF_FIXTURES=DIR`, writes the object at `url` to `DIR/NAME.json` and
    /// `DIR/NAME.pb` (the bodies, as the server sent them): how `tests/fixtures/` was made.
    async fn save_fixture(&self, url: &str, name: &str) {
        let Some(dir) = std::env::var_os("RUDDER_PROTOBUF_FIXTURES") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        std::fs::write(dir.join(format!("{name}.json")), self.get(url, JSON).await).unwrap();
        std::fs::write(
            dir.join(format!("{name}.pb")),
            self.get(url, PROTOBUF).await,
        )
        .unwrap();
    }

    async fn send_json(&self, method: &str, url: &str, content_type: &str, body: &Value) -> Value {
        let request = Request::builder()
            .method(method)
            .uri(url)
            .header("content-type", content_type)
            .header("accept", JSON)
            .body(serde_json::to_vec(body).unwrap())
            .unwrap();
        let text = self.client.request_text(request).await;
        let text = text.unwrap_or_else(|e| panic!("{method} {url}: {e}\n{body:#}"));
        serde_json::from_str(&text).unwrap()
    }

    /// Creates `object` (and writes `status` through the status subresource), then checks
    /// the object and its namespace's (or the cluster's) list.
    async fn check<K>(&mut self, object: Value, status: Option<Value>)
    where
        K: k8s_openapi::ListableResource
            + DeserializeOwned
            + serde::Serialize
            + PartialEq
            + Debug
            + 'static,
        K::Scope: 'static,
    {
        let url = collection::<K>(Some(&self.ns));
        let created = self.send_json("POST", &url, JSON, &object).await;
        let name = created["metadata"]["name"].as_str().unwrap().to_owned();
        if let Some(status) = status {
            let patch = json!({ "status": status });
            self.send_json(
                "PATCH",
                &format!("{url}/{name}/status"),
                "application/merge-patch+json",
                &patch,
            )
            .await;
        }
        self.compare_object::<K>(&format!("{url}/{name}")).await;
        self.compare_list::<K>(&url).await;
    }

    /// Reads `url` both ways until both carry one resourceVersion (a controller of the
    /// server's may write in between), and compares.
    async fn compare_object<K>(&mut self, url: &str)
    where
        K: k8s_openapi::ListableResource
            + DeserializeOwned
            + serde::Serialize
            + PartialEq
            + Debug
            + 'static,
        K::Scope: 'static,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let json_body = self.get(url, JSON).await;
            let proto_body = self.get(url, PROTOBUF).await;
            let from_json: K = serde_json::from_slice(&json_body)
                .unwrap_or_else(|e| panic!("{url}: JSON into {}: {e}", K::KIND));
            let envelope = rudder_protobuf::unknown(&proto_body)
                .unwrap_or_else(|e| panic!("{url}: envelope: {e}"));
            assert_eq!(envelope.kind, K::KIND, "{url}");
            assert_eq!(envelope.api_version, K::API_VERSION, "{url}");
            let decode = rudder_protobuf::decoder::<K>().expect("a decoder of every built-in kind");
            let from_proto = match decode(envelope.raw) {
                Ok(k) => k,
                Err(e) => {
                    self.failures.push(format!("{} {url}: {e}", K::KIND));
                    return;
                }
            };
            let rv =
                |v: &K| serde_json::to_value(v).unwrap()["metadata"]["resourceVersion"].clone();
            if rv(&from_json) != rv(&from_proto) && tokio::time::Instant::now() < deadline {
                continue;
            }
            self.objects += 1;
            if from_json != *from_proto {
                self.failures.push(format!(
                    "{} {url}: differs:\n{}",
                    K::KIND,
                    diff(
                        &serde_json::to_value(&from_json).unwrap(),
                        &serde_json::to_value(&*from_proto).unwrap(),
                        ""
                    )
                ));
            }
            return;
        }
    }

    async fn compare_list<K>(&mut self, url: &str)
    where
        K: k8s_openapi::ListableResource
            + DeserializeOwned
            + serde::Serialize
            + PartialEq
            + Debug
            + 'static,
        K::Scope: 'static,
    {
        // Both reads of one resourceVersion: a controller of the server's (the CRDs'
        // status, on 1.33) may write in between.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let (from_json, list) = loop {
            let json_body = self.get(url, JSON).await;
            let proto_body = self.get(url, PROTOBUF).await;
            let from_json: k8s_openapi::List<K> = serde_json::from_slice(&json_body).unwrap();
            let envelope = rudder_protobuf::unknown(&proto_body).unwrap();
            assert_eq!(envelope.kind, format!("{}List", K::KIND), "{url}");
            let decode = rudder_protobuf::decoder::<K>().unwrap();
            let list = rudder_protobuf::list(envelope.raw, decode)
                .unwrap_or_else(|e| panic!("{url}: list: {e}"));
            if list.resource_version == from_json.metadata.resource_version {
                break (from_json, list);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{url}: the list kept changing between the two reads"
            );
        };
        assert_eq!(list.continue_, None, "{url}");
        assert_eq!(list.items.len(), from_json.items.len(), "{url}");
        for (item, expected) in list.items.into_iter().zip(from_json.items) {
            self.objects += 1;
            match item {
                Err(e) => self.failures.push(format!("{}List {url}: {e}", K::KIND)),
                Ok(item) if *item != expected => self.failures.push(format!(
                    "{}List {url} item {:?}: differs:\n{}",
                    K::KIND,
                    expected_name(&expected),
                    diff(
                        &serde_json::to_value(&expected).unwrap(),
                        &serde_json::to_value(&*item).unwrap(),
                        ""
                    )
                )),
                Ok(_) => {}
            }
        }
        let kind = format!("{}/{}", K::API_VERSION, K::KIND);
        if !self.kinds.contains(&kind) {
            self.kinds.push(kind);
        }
    }
}

fn expected_name<K: serde::Serialize>(k: &K) -> Value {
    serde_json::to_value(k).unwrap()["metadata"]["name"].clone()
}

/// The paths where `a` (JSON) and `b` (protobuf) differ, one a line.
fn diff(a: &Value, b: &Value, path: &str) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut out = String::new();
            for key in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                let (l, r) = (
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                );
                if l != r {
                    out.push_str(&diff(l, r, &format!("{path}.{key}")));
                }
            }
            out
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .filter(|(_, (l, r))| l != r)
            .map(|(i, (l, r))| diff(l, r, &format!("{path}[{i}]")))
            .collect(),
        _ => format!("  {path}: json {a} / protobuf {b}\n"),
    }
}

fn pod_spec() -> Value {
    json!({
        "containers": [
            {
                "name": "app",
                "image": "registry.example/app:1.2.3",
                "command": ["/app"],
                "args": ["--port=8080", "--verbose"],
                "env": [
                    {"name": "MODE", "value": "production"},
                    {"name": "EMPTY", "value": ""},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level", "optional": true}}},
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}}
                ],
                "envFrom": [{"secretRef": {"name": "creds"}, "prefix": "DB_"}],
                "ports": [
                    {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                    {"name": "metrics", "containerPort": 9090}
                ],
                "resources": {
                    "requests": {"cpu": "250m", "memory": "64Mi"},
                    "limits": {"cpu": "1", "memory": "128Mi", "ephemeral-storage": "1Gi"}
                },
                "readinessProbe": {"httpGet": {"path": "/ready", "port": "http", "httpHeaders": [{"name": "X-Probe", "value": "1"}]}, "periodSeconds": 5, "failureThreshold": 3},
                "livenessProbe": {"tcpSocket": {"port": 8080}, "initialDelaySeconds": 10},
                "startupProbe": {"exec": {"command": ["cat", "/tmp/started"]}, "timeoutSeconds": 2},
                "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
                "volumeMounts": [
                    {"name": "config", "mountPath": "/etc/app", "readOnly": true},
                    {"name": "scratch", "mountPath": "/tmp"}
                ],
                "securityContext": {
                    "runAsNonRoot": true,
                    "runAsUser": 1000,
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"}
                },
                "imagePullPolicy": "IfNotPresent"
            },
            {
                "name": "sidecar",
                "image": "registry.example/proxy@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "ports": [{"containerPort": 15001, "hostPort": 0}],
                "resources": {"requests": {"cpu": "0.1", "memory": "1e6"}},
                "stdin": false,
                "tty": false
            }
        ],
        "initContainers": [{"name": "init", "image": "busybox", "command": ["true"], "restartPolicy": "Always"}],
        "volumes": [
            {"name": "config", "configMap": {"name": "settings", "defaultMode": 420, "items": [{"key": "a", "path": "a.conf"}]}},
            {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
            {"name": "creds", "secret": {"secretName": "creds", "optional": false}},
            {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3600, "audience": "api"}}, {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}}
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "automountServiceAccountToken": false,
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "app", "effect": "NoSchedule"},
            {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        ],
        "affinity": {
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}}]},
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}
        },
        "securityContext": {"fsGroup": 2000, "supplementalGroups": [3000, 3001], "sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}],
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["db.local"]}],
        "priority": 0,
        "enableServiceLinks": false
    })
}

fn template(labels: &Value) -> Value {
    json!({
        "metadata": {"labels": labels, "annotations": {"checksum/config": "abc"}},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}], "resources": {"requests": {"cpu": "100m"}}}]}
    })
}

fn meta(name: &str) -> Value {
    json!({"name": name, "labels": {"app": "web", "tier": "front"}, "annotations": {"note": "agreement test", "empty": ""}})
}

async fn run(ctx: &mut Ctx) {
    let ns = ctx.ns.clone();
    let now = "2026-01-02T03:04:05Z";
    let micro = "2026-01-02T03:04:05.123456Z";

    ctx.check::<core::ConfigMap>(json!({"metadata": meta("settings"), "data": {"level": "debug", "a": "x = 1\n", "empty": ""}, "binaryData": {"blob": "AAEC/w=="}}), None).await;
    ctx.check::<core::ConfigMap>(json!({"metadata": {"name": "bare"}}), None)
        .await;
    let config_maps = collection::<core::ConfigMap>(Some(&ns));
    ctx.save_fixture(&format!("{config_maps}/settings"), "configmap")
        .await;
    ctx.check::<core::Secret>(json!({"metadata": meta("creds"), "type": "Opaque", "data": {"password": "aHVudGVyMg==", "empty": ""}, "stringData": {"user": "admin"}, "immutable": true}), None).await;
    ctx.check::<core::Pod>(
        json!({"metadata": meta("web-0"), "spec": pod_spec()}),
        Some(json!({
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}
            ],
            "hostIP": "10.1.2.3", "hostIPs": [{"ip": "10.1.2.3"}],
            "podIP": "10.244.0.5", "podIPs": [{"ip": "10.244.0.5"}, {"ip": "fd00::5"}],
            "startTime": now, "qosClass": "Burstable",
            "containerStatuses": [
                {"name": "app", "ready": true, "started": true, "restartCount": 0, "image": "registry.example/app:1.2.3", "imageID": "registry.example/app@sha256:00", "containerID": "containerd://abc", "state": {"running": {"startedAt": now}}},
                {"name": "sidecar", "ready": false, "restartCount": 3, "image": "proxy", "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}}, "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": now, "finishedAt": now}}}
            ]
        })),
    )
    .await;
    let pods = collection::<core::Pod>(Some(&ns));
    ctx.save_fixture(&format!("{pods}/web-0"), "pod").await;
    ctx.check::<core::Node>(
        json!({"metadata": meta(&format!("{ns}-node")), "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"], "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": now}], "providerID": "kind://docker/x"}}),
        Some(json!({
            "capacity": {"cpu": "4", "memory": "8129364Ki", "pods": "110", "hugepages-2Mi": "0"},
            "allocatable": {"cpu": "3800m", "memory": "7Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": now, "lastTransitionTime": now, "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
            "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}, {"type": "Hostname", "address": "node-1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "m", "systemUUID": "u", "bootID": "b", "kernelVersion": "6.1", "osImage": "Debian", "containerRuntimeVersion": "containerd://1.7", "kubeletVersion": "v1.37.2", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": ["nginx:1.27"], "sizeBytes": 71234567}]
        })),
    )
    .await;
    ctx.check::<core::Service>(json!({"metadata": meta("web"), "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}, {"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"}], "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}}}}), None).await;
    ctx.check::<core::Service>(json!({"metadata": {"name": "nodeport"}, "spec": {"type": "NodePort", "ports": [{"port": 443, "targetPort": 8443}], "externalTrafficPolicy": "Local", "ipFamilyPolicy": "SingleStack"}}), None).await;
    ctx.check::<core::Service>(json!({"metadata": {"name": "headless"}, "spec": {"clusterIP": "None", "selector": {"app": "db"}, "publishNotReadyAddresses": true}}), None).await;
    ctx.check::<core::ServiceAccount>(json!({"metadata": meta("builder"), "secrets": [{"name": "builder-token"}], "imagePullSecrets": [{"name": "registry"}], "automountServiceAccountToken": false}), None).await;
    ctx.check::<core::Event>(json!({"metadata": {"name": "web-0.1"}, "involvedObject": {"kind": "Pod", "namespace": ns, "name": "web-0", "uid": "0b5e7a8e-0000-4000-8000-000000000000", "apiVersion": "v1", "fieldPath": "spec.containers{app}"}, "reason": "BackOff", "message": "Back-off restarting failed container", "source": {"component": "kubelet", "host": "node-1"}, "firstTimestamp": now, "lastTimestamp": now, "count": 7, "type": "Warning"}), None).await;
    ctx.check::<events::Event>(json!({"metadata": {"name": "web-0.2"}, "eventTime": micro, "reportingController": "example.com/agree", "reportingInstance": "agree-1", "action": "Reconcile", "reason": "Synced", "regarding": {"kind": "Pod", "namespace": ns, "name": "web-0"}, "note": "synced", "type": "Normal", "series": {"count": 2, "lastObservedTime": micro}}), None).await;
    ctx.check::<core::PersistentVolumeClaim>(json!({"metadata": meta("data"), "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}, "storageClassName": "fast", "volumeMode": "Filesystem", "selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}}), Some(json!({"phase": "Bound", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"]}))).await;
    ctx.check::<core::LimitRange>(json!({"metadata": {"name": "limits"}, "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m"}, "max": {"memory": "1Gi"}}]}}), None).await;
    ctx.check::<core::ResourceQuota>(json!({"metadata": {"name": "quota"}, "spec": {"hard": {"pods": "10", "requests.cpu": "4"}, "scopes": ["NotTerminating"]}}), None).await;
    ctx.check::<coordination::Lease>(json!({"metadata": {"name": "leader"}, "spec": {"holderIdentity": "pod-a_1234", "leaseDurationSeconds": 15, "acquireTime": micro, "renewTime": "2026-01-02T03:04:20.000001Z", "leaseTransitions": 0}}), None).await;
    ctx.check::<rbac::Role>(json!({"metadata": meta("reader"), "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]}, {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"], "verbs": ["get"]}]}), None).await;
    // An empty list written where the field has no `omitempty`: the server keeps it in etcd
    // as protobuf, so it reads back nil (`null`), as the decoder gives it.
    ctx.check::<rbac::Role>(
        json!({"metadata": {"name": "empty-rules"}, "rules": []}),
        None,
    )
    .await;
    ctx.check::<rbac::RoleBinding>(json!({"metadata": {"name": "reader"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}, "subjects": [{"kind": "ServiceAccount", "name": "builder", "namespace": ns}, {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "jane"}]}), None).await;
    ctx.check::<rbac::ClusterRole>(json!({"metadata": {"name": format!("{ns}-aggregate")}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.example.com/aggregate": "true"}}]}}), None).await;
    ctx.check::<rbac::ClusterRole>(json!({"metadata": {"name": format!("{ns}-urls")}, "rules": [{"nonResourceURLs": ["/healthz", "/metrics"], "verbs": ["get"]}]}), None).await;
    ctx.check::<apps::Deployment>(
        json!({"metadata": meta("web"), "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template(&json!({"app": "web"})), "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}}, "revisionHistoryLimit": 5, "minReadySeconds": 0, "progressDeadlineSeconds": 600}}),
        Some(json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2, "unavailableReplicas": 1, "conditions": [{"type": "Available", "status": "False", "lastUpdateTime": now, "lastTransitionTime": now, "reason": "MinimumReplicasUnavailable", "message": "Deployment does not have minimum availability."}]})),
    )
    .await;
    ctx.check::<apps::StatefulSet>(json!({"metadata": meta("db"), "spec": {"serviceName": "headless", "replicas": 2, "selector": {"matchLabels": {"app": "db"}}, "template": template(&json!({"app": "db"})), "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}], "podManagementPolicy": "Parallel", "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 1}}, "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"}, "ordinals": {"start": 1}}}), None).await;
    ctx.check::<apps::DaemonSet>(json!({"metadata": meta("agent"), "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template(&json!({"app": "agent"})), "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}}}}), None).await;
    ctx.check::<apps::ReplicaSet>(json!({"metadata": meta("web-abc"), "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "abc"}}, "template": template(&json!({"app": "web", "pod-template-hash": "abc"}))}}), None).await;
    ctx.check::<apps::ControllerRevision>(json!({"metadata": {"name": "db-1"}, "revision": 1, "data": {"spec": {"template": {"metadata": {"labels": {"app": "db"}}}}, "list": [1, 2.5, "x", null, true]}}), None).await;
    ctx.check::<batch::Job>(json!({"metadata": meta("migrate"), "spec": {"backoffLimit": 2, "completions": 1, "parallelism": 1, "activeDeadlineSeconds": 600, "ttlSecondsAfterFinished": 3600, "suspend": true, "completionMode": "NonIndexed", "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "migrate:1"}]}}, "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}}}), None).await;
    ctx.check::<batch::CronJob>(json!({"metadata": meta("nightly"), "spec": {"schedule": "0 3 * * *", "timeZone": "Etc/UTC", "suspend": true, "concurrencyPolicy": "Forbid", "successfulJobsHistoryLimit": 1, "startingDeadlineSeconds": 100, "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox", "args": ["date"]}]}}}}}}), Some(json!({"lastScheduleTime": now}))).await;
    ctx.check::<autoscaling::HorizontalPodAutoscaler>(json!({"metadata": meta("web"), "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 10, "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}, {"type": "Pods", "pods": {"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "1k"}}}], "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300, "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]}}}}), None).await;
    ctx.check::<networking::Ingress>(json!({"metadata": meta("web"), "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["web.example.com"], "secretName": "web-tls"}], "rules": [{"host": "web.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"name": "http"}}}}, {"path": "/api", "pathType": "Exact", "backend": {"service": {"name": "api", "port": {"number": 8080}}}}]}}], "defaultBackend": {"resource": {"apiGroup": "example.com", "kind": "Bucket", "name": "static"}}}}), None).await;
    ctx.check::<networking::NetworkPolicy>(json!({"metadata": meta("deny"), "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}, {"namespaceSelector": {"matchLabels": {"team": "a"}}}, {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}], "ports": [{"protocol": "TCP", "port": 80}, {"port": "http"}, {"port": 32000, "endPort": 32768}]}], "egress": [{}]}}), None).await;
    ctx.check::<networking::IngressClass>(json!({"metadata": {"name": format!("{ns}-nginx"), "annotations": {"ingressclass.kubernetes.io/is-default-class": "false"}}, "spec": {"controller": "example.com/ingress", "parameters": {"apiGroup": "example.com", "kind": "Params", "name": "p", "scope": "Cluster"}}}), None).await;
    ctx.check::<discovery::EndpointSlice>(json!({"metadata": {"name": "web-x", "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4", "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": true, "serving": true, "terminating": false}, "nodeName": "node-1", "zone": "a", "targetRef": {"kind": "Pod", "name": "web-0", "namespace": ns}}], "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"}]}), None).await;
    ctx.check::<storage::StorageClass>(json!({"metadata": {"name": format!("{ns}-fast")}, "provisioner": "example.com/csi", "parameters": {"type": "ssd", "iops": "3000"}, "reclaimPolicy": "Retain", "allowVolumeExpansion": true, "volumeBindingMode": "WaitForFirstConsumer", "mountOptions": ["noatime"], "allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}]}), None).await;
    ctx.check::<core::PersistentVolume>(json!({"metadata": {"name": format!("{ns}-pv")}, "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"], "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "fast", "hostPath": {"path": "/data", "type": "DirectoryOrCreate"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}, "claimRef": {"namespace": ns, "name": "data"}}}), Some(json!({"phase": "Bound", "lastPhaseTransitionTime": now}))).await;
    ctx.check::<storage::CSIDriver>(json!({"metadata": {"name": format!("{ns}.csi.example.com")}, "spec": {"attachRequired": false, "podInfoOnMount": true, "volumeLifecycleModes": ["Persistent", "Ephemeral"], "fsGroupPolicy": "File", "tokenRequests": [{"audience": "vault", "expirationSeconds": 600}], "requiresRepublish": false}}), None).await;
    ctx.check::<policy::PodDisruptionBudget>(json!({"metadata": meta("web"), "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}, "unhealthyPodEvictionPolicy": "AlwaysAllow"}}), Some(json!({"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 3, "disruptionsAllowed": 0, "disruptedPods": {"web-1": now}, "conditions": [{"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": "", "lastTransitionTime": now, "observedGeneration": 1}]}))).await;
    ctx.check::<scheduling::PriorityClass>(json!({"metadata": {"name": format!("{ns}-high")}, "value": 1000000, "globalDefault": false, "description": "high", "preemptionPolicy": "Never"}), None).await;
    ctx.check::<node::RuntimeClass>(json!({"metadata": {"name": format!("{ns}-gvisor")}, "handler": "runsc", "overhead": {"podFixed": {"memory": "120Mi", "cpu": "250m"}}, "scheduling": {"nodeSelector": {"sandbox": "true"}, "tolerations": [{"key": "sandbox", "operator": "Exists"}]}}), None).await;
    ctx.check::<admission::ValidatingWebhookConfiguration>(json!({"metadata": {"name": format!("{ns}-hook")}, "webhooks": [{"name": "validate.example.com", "clientConfig": {"url": "https://hook.example.com/validate", "caBundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="}, "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"], "scope": "Namespaced"}], "failurePolicy": "Ignore", "matchPolicy": "Equivalent", "sideEffects": "None", "timeoutSeconds": 5, "admissionReviewVersions": ["v1"], "namespaceSelector": {"matchLabels": {"hooked": "yes"}}, "matchConditions": [{"name": "not-system", "expression": "!request.userInfo.username.startsWith('system:')"}]}]}), None).await;
    ctx.check::<CustomResourceDefinition>(
        json!({"metadata": {"name": format!("widgets.{ns}.example.com")}, "spec": {
            "group": format!("{ns}.example.com"),
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wd"], "categories": ["all"]},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size", "priority": 0}],
                "selectableFields": [{"jsonPath": ".spec.color"}],
                "schema": {"openAPIV3Schema": {"type": "object", "description": "A widget.", "required": ["spec"], "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 100, "default": 3, "format": "int32"},
                        "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 100.5},
                        "replicas": {"type": "integer"},
                        "color": {"type": "string", "enum": ["red", "green"], "pattern": "^[a-z]+$", "maxLength": 10},
                        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5, "x-kubernetes-list-type": "set"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                        "nested": {"type": "object", "nullable": true, "properties": {"deep": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number", "multipleOf": 0.5}}}}}}
                    }, "x-kubernetes-validations": [{"rule": "self.size <= 100", "message": "too big", "reason": "FieldValueInvalid", "fieldPath": ".size"}]},
                    "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}
                }}}
            }]
        }}),
        None,
    )
    .await;

    // What the server makes itself.
    ctx.compare_list::<core::Namespace>(&collection::<core::Namespace>(None))
        .await;
    ctx.compare_list::<core::Service>("/api/v1/namespaces/default/services")
        .await;
    ctx.compare_list::<core::Endpoints>("/api/v1/namespaces/default/endpoints")
        .await;
    ctx.compare_list::<discovery::EndpointSlice>(
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
    )
    .await;
    ctx.compare_list::<coordination::Lease>(
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
    )
    .await;
    ctx.compare_list::<rbac::ClusterRole>(&collection::<rbac::ClusterRole>(None))
        .await;
    ctx.compare_list::<rbac::ClusterRoleBinding>(&collection::<rbac::ClusterRoleBinding>(None))
        .await;
    ctx.compare_list::<rbac::Role>(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles",
    )
    .await;
    ctx.compare_list::<flowcontrol::FlowSchema>(&collection::<flowcontrol::FlowSchema>(None))
        .await;
    ctx.compare_list::<flowcontrol::PriorityLevelConfiguration>(&collection::<
        flowcontrol::PriorityLevelConfiguration,
    >(None))
        .await;
    ctx.compare_list::<scheduling::PriorityClass>(&collection::<scheduling::PriorityClass>(None))
        .await;
    ctx.compare_list::<admission::ValidatingAdmissionPolicy>(&collection::<
        admission::ValidatingAdmissionPolicy,
    >(None))
        .await;
    ctx.compare_list::<networking::ServiceCIDR>(&collection::<networking::ServiceCIDR>(None))
        .await;
    ctx.compare_list::<networking::IPAddress>(&collection::<networking::IPAddress>(None))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_equals_json_for_built_in_kinds() {
    let env = TestEnv::builder().start().await.unwrap();
    let ns = env.namespace("agree").await.unwrap();
    let mut ctx = Ctx {
        client: env.client().unwrap(),
        ns: ns.name().to_owned(),
        failures: Vec::new(),
        kinds: Vec::new(),
        objects: 0,
    };
    run(&mut ctx).await;
    eprintln!(
        "Kubernetes {}: {} objects and list items of {} kinds compared ({} disagree): {}",
        env.version(),
        ctx.objects,
        ctx.kinds.len(),
        ctx.failures.len(),
        ctx.kinds.join(", ")
    );
    assert!(
        ctx.failures.is_empty(),
        "{} disagreement(s):\n{}",
        ctx.failures.len(),
        ctx.failures.join("\n")
    );
    assert!(ctx.objects > 100, "only {} objects compared", ctx.objects);
}

/// A protobuf watch: frames of a 4-byte big-endian length and a `WatchEvent`, whose object
/// is the `k8s\0` envelope of the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_frames_decode() {
    let env = TestEnv::builder().start().await.unwrap();
    let ns = env.namespace("watch").await.unwrap();
    let ctx = Ctx {
        client: env.client().unwrap(),
        ns: ns.name().to_owned(),
        failures: Vec::new(),
        kinds: Vec::new(),
        objects: 0,
    };
    let url = collection::<core::ConfigMap>(Some(&ctx.ns));
    let listed: Value = serde_json::from_slice(&ctx.get(&url, JSON).await).unwrap();
    let rv = listed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    for name in ["one", "two"] {
        ctx.send_json(
            "POST",
            &url,
            JSON,
            &json!({"metadata": {"name": name}, "data": {"k": name}}),
        )
        .await;
    }
    // The server ends the watch after timeoutSeconds; both events came long before.
    let body = ctx
        .get(
            &format!("{url}?watch=true&resourceVersion={rv}&timeoutSeconds=2"),
            PROTOBUF,
        )
        .await;
    let mut rest = body.as_slice();
    let mut names = Vec::new();
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let frame = &rest[4..4 + len];
        rest = &rest[4 + len..];
        let event = rudder_protobuf::watch_event(frame).unwrap();
        assert_eq!(event.type_, "ADDED");
        let envelope = rudder_protobuf::unknown(event.object).unwrap();
        assert_eq!((envelope.api_version, envelope.kind), ("v1", "ConfigMap"));
        let cm: core::ConfigMap = std::sync::Arc::unwrap_or_clone(
            rudder_protobuf::decoder::<core::ConfigMap>().unwrap()(envelope.raw).unwrap(),
        );
        assert_eq!(cm.data.unwrap()["k"], cm.metadata.name.clone().unwrap());
        names.push(cm.metadata.name.unwrap());
    }
    assert_eq!(names, ["one", "two"]);
}
