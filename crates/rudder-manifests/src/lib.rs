//! What an operator must tell the cluster, derived from its code rather than written by
//! hand: the RBAC its controllers need ([`rbac`]) and the objects that deploy it
//! ([`deploy`]); and what its monitoring needs, over the metrics every manager exposes:
//! Prometheus rules ([`alerts`]) and Grafana dashboards ([`dashboards`]).
//!
//! Start with [`rbac::Permissions`] (declare what a controller reads and writes; the
//! manager resolves it against its cache into [`rbac::Rules`]) or with [`deploy::render`]
//! (every object of a deployment, from what the manager serves). The facade's
//! `rudder::manifests::manifests(&manager, &options)` does both for a manager.
//!
//! ```
//! use rudder_manifests::deploy::{DeployOptions, Served, WebhookManifests, render};
//! use rudder_manifests::rbac::{RuleScope, Rules, Verb};
//!
//! # fn main() -> Result<(), serde_json::Error> {
//! let mut rules = Rules::new();
//! rules.add(RuleScope::Namespace("ops".into()), "", "configmaps", Verb::READ);
//! rules.add(RuleScope::Cluster, "coordination.k8s.io", "leases", [Verb::Get]);
//! let served = Served {
//!     health_address: Some(([0, 0, 0, 0], 8081).into()),
//!     rules,
//!     ..Served::default()
//! };
//! let options = DeployOptions::new("my-operator", "ops", "example/my-operator:1");
//! let manifests = render(&served, &options, Vec::new(), WebhookManifests::default())?;
//! assert_eq!(manifests.rbac.roles.len(), 1);
//! assert!(manifests.rbac.cluster_role.is_some());
//! assert!(manifests.metrics_service.is_none());
//! # Ok(())
//! # }
//! ```
//!
//! # Where the manifests live
//!
//! This crate sits below the manager and the lease crate, so runtime code declares the rules
//! it needs next to itself (a sharding ring's Leases:
//! `rudder_lease::sharding::ShardingConfig::permissions`; the manager's own Lease and
//! Secret: `rudder_manager::rbac`), and it knows nothing of the manager: [`deploy::Served`]
//! is what the facade reads from one. The webhook configurations are rendered by
//! `rudder_webhook::manifest`, beside the webhook server whose paths they name, from what
//! that server registered; [`deploy::render`] takes them as they come.
//!
//! # Alerts and dashboards
//!
//! [`alerts::rule_groups`] and [`dashboards::dashboards`] need nothing from the manager:
//! the metrics they read have the same names and labels in every Rudder operator
//! (controller-runtime's, plus `rudder_cache_*` and `rudder_fleet_*`). Scope them to one
//! operator with a [`promql::Selector`] (its scrape job, its namespace). The project's tests
//! run each rule through `promtool test rules`, and check every metric a rule or panel reads
//! against a real manager's `/metrics`.

pub mod alerts;
pub mod dashboards;
pub mod deploy;
pub mod promql;
pub mod rbac;
