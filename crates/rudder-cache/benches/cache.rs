//! Benchmarks of the cache against kube-runtime (filled in below).

fn main() {}
