//! Bodies a real API server (1.37.2) sent for one ConfigMap and one Pod, as JSON and as
//! protobuf (`tests/fixtures/`, written by `tests/agree.rs` with
//! `RUDDER_PROTOBUF_FIXTURES=DIR`): decoded offline, they agree; every truncation and every
//! single-byte corruption of the real messages is an error or a value, never a panic.

#![allow(clippy::unwrap_used)]

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use rudder_protobuf::{decode, decoder, unknown};

const CONFIG_MAP_JSON: &[u8] = include_bytes!("fixtures/configmap.json");
const CONFIG_MAP_PB: &[u8] = include_bytes!("fixtures/configmap.pb");
const POD_JSON: &[u8] = include_bytes!("fixtures/pod.json");
const POD_PB: &[u8] = include_bytes!("fixtures/pod.pb");

#[test]
fn real_bodies_agree() {
    let pod: Pod = serde_json::from_slice(POD_JSON).unwrap();
    let envelope = unknown(POD_PB).unwrap();
    assert_eq!((envelope.api_version, envelope.kind), ("v1", "Pod"));
    assert_eq!(*decoder::<Pod>().unwrap()(envelope.raw).unwrap(), pod);
    assert_eq!(decode::<Pod>(POD_PB).unwrap(), pod);
    assert!(
        pod.metadata.managed_fields.is_some(),
        "a realistic Pod has managedFields"
    );
    assert_eq!(pod.spec.as_ref().unwrap().containers.len(), 2);

    let cm: ConfigMap = serde_json::from_slice(CONFIG_MAP_JSON).unwrap();
    assert_eq!(decode::<ConfigMap>(CONFIG_MAP_PB).unwrap(), cm);
}

#[test]
fn truncated_and_corrupted_real_messages_never_panic() {
    let raw = unknown(POD_PB).unwrap().raw;
    let mut errors = 0;
    for end in 0..raw.len() {
        errors += usize::from(decode::<Pod>(&raw[..end]).is_err());
    }
    // Most cuts land inside a field; a cut between two top-level fields is a valid, shorter
    // Pod.
    assert!(
        errors > raw.len() / 2,
        "{errors} errors in {} cuts",
        raw.len()
    );
    for end in 0..POD_PB.len() {
        let _ = unknown(&POD_PB[..end]).map(|u| decode::<Pod>(u.raw));
    }
    for i in 0..raw.len() {
        for byte in [0x00, 0x80, 0xff] {
            let mut bad = raw.to_vec();
            bad[i] = byte;
            let _ = decode::<Pod>(&bad);
        }
    }
}
