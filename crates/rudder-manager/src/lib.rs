//! The manager: what turns controllers into a process you deploy (work in progress).
//!
//! [`leader_election`] elects one leader among replicas with a `coordination.k8s.io/v1`
//! Lease, compatible with client-go's.

pub mod leader_election;
