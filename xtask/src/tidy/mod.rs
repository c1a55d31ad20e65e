//! Checks of the source tree's shape, to become `cargo xtask tidy`: so far the file-level
//! import cycles inside each crate (`cycles.rs`).

pub(crate) mod cycles;
