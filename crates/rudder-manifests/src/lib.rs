//! What an operator must tell the cluster, derived from its code rather than written by
//! hand: the RBAC its controllers need ([`rbac`]).
//!
//! Start with [`rbac::Permissions`]: declare what a controller reads and writes, resolve it
//! against the cache that will watch those types into [`rbac::Rules`], and render those as
//! Roles, a ClusterRole and their bindings.
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use rudder_manifests::rbac::{RuleScope, Rules, Verb};
//!
//! let mut rules = Rules::new();
//! rules.add(RuleScope::Namespace("ops".into()), "", "configmaps", Verb::READ);
//! rules.add(RuleScope::Cluster, "coordination.k8s.io", "leases", [Verb::Get]);
//! let objects = rules.render("my-operator", "my-operator", "ops");
//! assert_eq!(objects.roles.len(), 1);
//! assert!(objects.cluster_role.is_some());
//! # let _ = std::marker::PhantomData::<ConfigMap>;
//! ```
//!
//! # Where the manifests live
//!
//! This crate sits below the manager and the lease crate, so runtime code declares the rules
//! it needs next to itself (a sharding ring's Leases: `rudder_lease::sharding::ShardingConfig::permissions`;
//! the manager's own Lease and Secret: `rudder_manager::rbac`). The webhook configurations
//! are rendered by `rudder_webhook::manifest` from what the webhook server registered, and
//! the facade's `rudder::manifests` gathers one manager's CRDs, RBAC, Deployment, Services,
//! NetworkPolicy and webhook configurations into one list.

pub mod deploy;
pub mod rbac;
