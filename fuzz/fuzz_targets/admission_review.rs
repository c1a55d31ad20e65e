//! rudder-webhook's review parser against serde_json: its document reader parses exactly
//! the bytes serde_json parses as a JSON value, into the same value; a review body decodes
//! or is refused without a panic, and the objects it locates are the review's own.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rudder_webhook::admission::fuzzing::{parse_tree, review_objects};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let reference = serde_json::from_slice::<Value>(data);
    let tree = parse_tree(data);
    match (&tree, &reference) {
        (Ok(tree), Ok(value)) => assert_eq!(tree, value, "the same document"),
        (Err(_), Err(_)) => {}
        (Ok(tree), Err(error)) => panic!("parsed {tree:?}; serde_json: {error}"),
        (Err(error), Ok(value)) => panic!("refused ({error}); serde_json read {value:?}"),
    }

    if let Ok((object, old_object)) = review_objects(data) {
        // A review that decodes is JSON, and each object located is its request's.
        let Ok(review) = reference else {
            panic!("a review decoded from bytes serde_json does not read");
        };
        for (located, key) in [(object, "object"), (old_object, "oldObject")] {
            let expected = review
                .get("request")
                .and_then(|request| request.get(key))
                .filter(|value| !value.is_null());
            let located = located.map(|text| {
                serde_json::from_slice::<Value>(&text).expect("a located object is JSON")
            });
            assert_eq!(located.as_ref(), expected, "the request's {key}");
        }
    }
});
