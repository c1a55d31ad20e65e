//! rudder-protobuf's decoders on arbitrary bytes: never a panic; a value that decodes is one
//! JSON carries (written by serde_json and read back, it is equal), and an envelope decodes
//! to the same value as the message inside it, every time.
//!
//! Input: one byte choosing what reads the rest (a kind's decoder, the envelope, a list, a
//! watch event), then the bytes.
#![no_main]

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use libfuzzer_sys::fuzz_target;
use rudder_protobuf::{MAGIC, Message};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What JSON makes of `value`, written and read back: equal, or a disagreement.
fn json_round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: &T) {
    let json = serde_json::to_vec(value).expect("a decoded value serialises");
    let back: T = match serde_json::from_slice(&json) {
        Ok(back) => back,
        Err(error) => panic!(
            "{value:?} written as {} does not read back: {error}",
            String::from_utf8_lossy(&json)
        ),
    };
    assert_eq!(
        &back,
        value,
        "through JSON: {}",
        String::from_utf8_lossy(&json)
    );
}

fn kind<T>(bytes: &[u8])
where
    T: Message + Serialize + DeserializeOwned + PartialEq + Debug,
{
    let Ok(value) = rudder_protobuf::decode::<T>(bytes) else {
        return;
    };
    json_round_trip(&value);
    // Decoding is a function of the bytes.
    let again = rudder_protobuf::decode::<T>(bytes).expect("decoded once");
    assert_eq!(again, value, "decoded twice");
    if bytes.starts_with(MAGIC) {
        let raw = rudder_protobuf::unknown(bytes)
            .expect("an envelope decoded")
            .raw;
        let inner = rudder_protobuf::decode::<T>(raw);
        // `raw` may itself start with the magic: then it is an envelope of its own.
        if !raw.starts_with(MAGIC) {
            assert_eq!(
                inner.as_ref().ok(),
                Some(&value),
                "the envelope's raw alone"
            );
        }
    }
}

fn list<T>(bytes: &[u8])
where
    T: Message + Serialize + DeserializeOwned + PartialEq + Debug + 'static,
{
    let item: rudder_protobuf::Decoder<T> =
        rudder_protobuf::decoder::<T>().expect("a built-in kind");
    let Ok(list) = rudder_protobuf::list(bytes, item) else {
        return;
    };
    for decoded in list.items.iter().flatten() {
        json_round_trip(&**decoded);
    }
}

fn watch_event(bytes: &[u8]) {
    let Ok(event) = rudder_protobuf::watch_event(bytes) else {
        return;
    };
    let Ok(envelope) = rudder_protobuf::unknown(event.object) else {
        return;
    };
    let _ = (envelope.api_version, envelope.kind, event.type_);
    if let Ok(pod) = rudder_protobuf::decode::<Pod>(envelope.raw) {
        json_round_trip(&pod);
    }
    if let Ok(status) = rudder_protobuf::decode::<Status>(envelope.raw) {
        json_round_trip(&status);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, bytes)) = data.split_first() else {
        return;
    };
    match choice % 12 {
        0 => kind::<ConfigMap>(bytes),
        1 => kind::<Secret>(bytes),
        2 => kind::<Pod>(bytes),
        3 => kind::<Node>(bytes),
        4 => kind::<Deployment>(bytes),
        5 => kind::<CustomResourceDefinition>(bytes),
        6 => kind::<Status>(bytes),
        7 => {
            let _ = rudder_protobuf::unknown(bytes);
        }
        8 => list::<ConfigMap>(bytes),
        9 => list::<Pod>(bytes),
        10 => list::<CustomResourceDefinition>(bytes),
        _ => watch_event(bytes),
    }
});
