//! The runtime's tests: envelopes, lists, watch events, presence, and garbage.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, ContainerPort, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::*;

/// A tiny protobuf writer for the tests.
#[derive(Default, Clone)]
struct W(Vec<u8>);

impl W {
    fn varint(mut self, mut v: u64) -> Self {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
        self
    }
    fn key(self, tag: u32, wire: u8) -> Self {
        self.varint(u64::from(tag) << 3 | u64::from(wire))
    }
    fn uint(self, tag: u32, v: u64) -> Self {
        self.key(tag, 0).varint(v)
    }
    fn bytes(self, tag: u32, b: &[u8]) -> Self {
        let mut w = self.key(tag, 2).varint(b.len() as u64);
        w.0.extend_from_slice(b);
        w
    }
    fn str(self, tag: u32, s: &str) -> Self {
        self.bytes(tag, s.as_bytes())
    }
    fn msg(self, tag: u32, m: &W) -> Self {
        self.bytes(tag, &m.0)
    }
}

fn meta(name: &str) -> W {
    // name = 1, namespace = 3, resourceVersion = 6, creationTimestamp = 8 (seconds = 1),
    // labels = 11 (a map entry), plus gogo's zero fields: generateName = 2 "", uid = 5 "".
    W::default()
        .str(1, name)
        .str(2, "")
        .str(3, "default")
        .str(5, "")
        .str(6, "42")
        .msg(8, &W::default().uint(1, 1_700_000_000))
        .msg(11, &W::default().str(1, "app").str(2, "web"))
}

fn config_map() -> W {
    W::default()
        .msg(1, &meta("conf"))
        .msg(2, &W::default().str(1, "mode").str(2, "dev"))
        .msg(3, &W::default().str(1, "blob").bytes(2, &[0, 1, 2]))
}

fn envelope(api_version: &str, kind: &str, raw: &W) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend(
        W::default()
            .msg(1, &W::default().str(1, api_version).str(2, kind))
            .msg(2, raw)
            .str(3, "")
            .str(4, "")
            .0,
    );
    out
}

#[test]
fn decodes_a_config_map_through_its_envelope() {
    let body = envelope("v1", "ConfigMap", &config_map());
    let opened = unknown(&body).unwrap();
    assert_eq!((opened.api_version, opened.kind), ("v1", "ConfigMap"));
    let decoded = decoder::<ConfigMap>().unwrap()(opened.raw).unwrap();
    let expected = ConfigMap {
        metadata: ObjectMeta {
            name: Some("conf".into()),
            namespace: Some("default".into()),
            resource_version: Some("42".into()),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap(),
            )),
            labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("mode".into(), "dev".into())])),
        binary_data: Some(BTreeMap::from([(
            "blob".into(),
            k8s_openapi::ByteString(vec![0, 1, 2]),
        )])),
        ..ConfigMap::default()
    };
    assert_eq!(*decoded, expected);
    // `decode` takes the body with its envelope as well, and the envelope without magic.
    assert_eq!(decode::<ConfigMap>(&body).unwrap(), expected);
    assert_eq!(unknown(&body[4..]).unwrap(), opened);
}

#[test]
fn presence_follows_json() {
    // ContainerPort: containerPort = 3 (no omitempty: zero is Some(0) in JSON... but the
    // Rust field is required), hostPort = 2 (omitempty int32: zero is None), name = 1
    // (omitempty: "" is None), protocol = 4, hostIP = 5.
    let port = W::default()
        .str(1, "")
        .uint(2, 0)
        .uint(3, 8080)
        .str(4, "TCP")
        .str(5, "");
    let container = W::default().str(1, "app").msg(6, &port);
    // PodSpec: containers = 2; Pod: spec = 2.
    let pod = W::default()
        .msg(1, &meta("p"))
        .msg(2, &W::default().msg(2, &container));
    let pod: Pod = decode(&pod.0).unwrap();
    let spec = pod.spec.unwrap();
    assert_eq!(
        spec.containers,
        vec![Container {
            name: "app".into(),
            ports: Some(vec![ContainerPort {
                container_port: 8080,
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            }]),
            ..Container::default()
        }]
    );
    // The zero Time (an empty message) is None.
    let zero_time = W::default().msg(1, &W::default().str(1, "x").msg(8, &W::default()));
    let decoded: ConfigMap = decode(&zero_time.0).unwrap();
    assert_eq!(decoded.metadata.creation_timestamp, None);
    assert_eq!(decoded.metadata.name.as_deref(), Some("x"));
    // A pointer field present with its zero value is Some: ObjectMeta.generation is not a
    // pointer (omitempty int64: zero is None), ServiceSpec.allocateLoadBalancerNodePorts is
    // (tag 20).
    let service = W::default().msg(2, &W::default().uint(20, 0));
    let service: Service = decode(&service.0).unwrap();
    assert_eq!(
        service.spec.unwrap().allocate_load_balancer_node_ports,
        Some(false)
    );
}

#[test]
fn reads_int_or_string_and_packed_repeated_scalars() {
    // ServicePort: port = 3, targetPort = 4 (IntOrString: type = 1, intVal = 2, strVal = 3).
    let named = W::default()
        .uint(3, 80)
        .msg(4, &W::default().uint(1, 1).str(3, "http"));
    let numbered = W::default()
        .uint(3, 81)
        .msg(4, &W::default().uint(1, 0).uint(2, 8081));
    let service = W::default().msg(2, &W::default().msg(1, &named).msg(1, &numbered));
    let service: Service = decode(&service.0).unwrap();
    let ports = service.spec.unwrap().ports.unwrap();
    assert_eq!(
        ports[0].target_port,
        Some(IntOrString::String("http".into()))
    );
    assert_eq!(ports[1].target_port, Some(IntOrString::Int(8081)));

    // PodSecurityContext.supplementalGroups (tag 4, repeated int64): packed and unpacked.
    let packed = W::default().bytes(4, &W::default().varint(1).varint(2).0);
    let unpacked = W::default().uint(4, 3);
    let mut both = packed.0;
    both.extend(unpacked.0);
    let pod = W::default().msg(2, &W::default().bytes(14, &both));
    let pod: Pod = decode(&pod.0).unwrap();
    let groups = pod
        .spec
        .unwrap()
        .security_context
        .unwrap()
        .supplemental_groups;
    assert_eq!(groups, Some(vec![1, 2, 3]));
}

#[test]
fn repeated_fields_are_sized_exactly() {
    // ServiceSpec.ports (tag 1), three values one after another: one allocation, no spare
    // room; a value of another field between two runs of one field still decodes them all.
    let port = |n: u64| W::default().uint(3, n);
    let spec = W::default()
        .msg(1, &port(80))
        .msg(1, &port(81))
        .msg(1, &port(82));
    let service: Service = decode(&W::default().msg(2, &spec).0).unwrap();
    let ports = service.spec.unwrap().ports.unwrap();
    assert_eq!(ports.len(), 3);
    assert_eq!(ports.capacity(), 3);
    let split = W::default()
        .msg(1, &port(80))
        .str(6, "ClusterIP")
        .msg(1, &port(81));
    let service: Service = decode(&W::default().msg(2, &split).0).unwrap();
    let ports: Vec<i32> = service
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(ports, [80, 81]);
    // A truncated value ends the count; the read fails where it is.
    let mut truncated = W::default().msg(1, &port(80)).0;
    truncated.extend([0x0a, 0x05, 0x18]);
    assert!(decode::<Service>(&W::default().bytes(2, &truncated).0).is_err());
    // Packed scalars: no spare room either.
    let packed = W::default().bytes(4, &W::default().varint(1).varint(2).varint(3).0);
    let pod: Pod = decode(&W::default().msg(2, &W::default().bytes(14, &packed.0)).0).unwrap();
    let groups = pod
        .spec
        .unwrap()
        .security_context
        .unwrap()
        .supplemental_groups
        .unwrap();
    assert_eq!((groups.len(), groups.capacity()), (3, 3));
}

#[test]
fn skips_unknown_tags() {
    let mut cm = config_map();
    cm = cm
        .uint(900, 7)
        .str(901, "from a newer server")
        .key(902, 1)
        .varint(0);
    cm.0.extend([0u8; 7]); // the rest of the fixed64
    cm = cm.key(903, 5);
    cm.0.extend([0u8; 4]);
    let decoded: ConfigMap = decode(&cm.0).unwrap();
    assert_eq!(decoded.data.unwrap()["mode"], "dev");
}

#[test]
fn lists_decode_item_by_item() {
    let bad_item = W::default().msg(1, &W::default().bytes(1, &[0xff, 0xfe]));
    let body = W::default()
        .msg(1, &W::default().str(2, "77").str(3, "").uint(4, 5))
        .msg(2, &config_map())
        .msg(2, &bad_item)
        .msg(2, &config_map());
    let list = list(&body.0, decode::<ConfigMap>).unwrap();
    assert_eq!(list.resource_version.as_deref(), Some("77"));
    assert_eq!(list.continue_, None);
    assert_eq!(list.remaining_item_count, Some(5));
    assert_eq!(list.items.len(), 3);
    assert!(list.items[0].is_ok() && list.items[2].is_ok());
    let error = list.items[1].as_ref().unwrap_err().to_string();
    assert_eq!(
        error,
        "List.items (tag 2) > ConfigMap.metadata (tag 1) > ObjectMeta.name (tag 1): invalid \
         UTF-8 in a string (invalid utf-8 sequence of 1 bytes from index 0)"
    );
}

#[test]
fn watch_events_and_status() {
    let status = W::default()
        .str(2, "Failure")
        .str(3, "too old resource version: 1 (2)")
        .str(4, "Expired")
        .uint(6, 410);
    let object = envelope("v1", "Status", &status);
    let frame = W::default()
        .str(1, "ERROR")
        .msg(2, &W::default().bytes(1, &object));
    let event = watch_event(&frame.0).unwrap();
    assert_eq!(event.type_, "ERROR");
    assert_eq!(event.object, object.as_slice());
    let envelope = unknown(event.object).unwrap();
    assert_eq!(envelope.kind, "Status");
    let status = decoder::<Status>().unwrap()(envelope.raw).unwrap();
    assert_eq!(status.code, Some(410));
    assert_eq!(status.reason.as_deref(), Some("Expired"));
    assert_eq!(status.status.as_deref(), Some("Failure"));
}

#[test]
fn the_registry_has_kinds_only() {
    assert!(decoder::<Pod>().is_some());
    assert!(decoder::<k8s_openapi::api::apps::v1::Deployment>().is_some());
    assert!(decoder::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>().is_some());
    assert!(decoder::<ObjectMeta>().is_none());
    assert!(decoder::<serde_json::Value>().is_none());
    assert!(decoder::<String>().is_none());
}

#[test]
fn errors_say_where_and_why() {
    // ConfigMap.data's value has the varint wire type.
    let cm = W::default().msg(2, &W::default().str(1, "k").uint(2, 1));
    let error = decode::<ConfigMap>(&cm.0).unwrap_err().to_string();
    assert_eq!(
        error,
        "ConfigMap.data (tag 2) > map entry.value (tag 2): wire type varint where \
         length-delimited was expected"
    );
    // Nesting past the bound: JSONSchemaProps.not (tag 28) in itself, 300 deep.
    let mut props = W::default();
    for _ in 0..300 {
        props = W::default().msg(28, &props);
    }
    let crd_like = decode::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
    >(&props.0);
    assert!(crd_like.unwrap_err().reason().contains("nested more than"));
}

#[test]
fn garbage_and_truncations_never_panic() {
    let body = envelope("v1", "ConfigMap", &config_map());
    for end in 0..body.len() {
        let cut = &body[..end];
        let _ = unknown(cut).map(|u| decode::<ConfigMap>(u.raw));
        let _ = decode::<ConfigMap>(cut);
        let _ = decode::<Pod>(&cut[4.min(end)..]);
        let _ = watch_event(cut);
        let _ = list(cut, decode::<Pod>);
    }
    // Every byte flipped to every value, one at a time.
    let raw = config_map().0;
    for i in 0..raw.len() {
        for b in 0..=255u8 {
            let mut bad = raw.clone();
            bad[i] = b;
            let _ = decode::<ConfigMap>(&bad);
            let _ = decode::<Pod>(&bad);
        }
    }
}

proptest::proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let _ = decode::<Pod>(&bytes);
        let _ = decode::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(&bytes);
        let _ = unknown(&bytes);
        let _ = watch_event(&bytes);
        let _ = list(&bytes, decode::<Pod>);
    }
}
