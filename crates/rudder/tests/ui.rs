//! The builders' compile errors: each case in `tests/ui` misuses a controller builder's call
//! order (the single-cluster one's, or a fleet's, which share the order markers) and must
//! fail with the message its `.stderr` file holds, one that names the fix.
//!
//! After a deliberate change to a message, write the files anew with
//! `TRYBUILD=overwrite cargo test -p rudder-runtime --test ui` and review the diff.

#[test]
fn builder_order_mistakes_name_the_fix() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
