//! The versions of what the project builds and tests against, named once.
//!
//! The envtest install builds these, the Go anchors (`go/go.mod`) pin the matching client-go,
//! and a test below that file keeps the two in step.

/// The Kubernetes release everything runs on by default: the newest patch of the newest minor
/// that k8s-openapi's `latest` feature targets and the machine's Go builds. `go/go.mod` requires
/// the client-go, api and apimachinery of this release (`v0.<minor>.<patch>`).
pub const DEFAULT_KUBERNETES: &str = "1.37.2";

/// The oldest Kubernetes release k8s-openapi supports: the second version CI runs the suites on.
pub const OLDEST_KUBERNETES: &str = "1.33.13";

/// The etcd release the test control plane stores its data in.
pub const ETCD: &str = "3.6.16";

/// The KWOK release that gives the test control plane fake nodes, so Pods get scheduled and run.
pub const KWOK: &str = "0.8.0";
