//! Benchmark placeholder (filled in below in this change series).
fn main() {}
