//! Leader election with a `coordination.k8s.io/v1` Lease (being written).
