//! The Rust code blocks of README.md and the book's pages (`docs/*.md`), compiled as this
//! crate's doctests: `cargo test --doc -p rudder-doctests`. Each page is the documentation of
//! an item that exists only when rustdoc collects doctests, so nothing else builds them.
//!
//! A block is Rust unless its fence names another language (` ```sh `, ` ```toml `,
//! ` ```text `); a block that needs a cluster is ` ```rust,no_run ` (compiled, not run).
//! The lines a block needs but a reader does not (imports, the surrounding function) start
//! with `# `, which rustdoc and mdBook both hide. `cargo xtask tidy` checks that every page
//! of `docs/` is included here.

/// README.md.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct Readme;

/// docs/SUMMARY.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/SUMMARY.md")]
pub struct Summary;

/// docs/api.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/api.md")]
pub struct Api;

/// docs/benchmarks.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/benchmarks.md")]
pub struct Benchmarks;

/// docs/deploying-an-operator.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/deploying-an-operator.md")]
pub struct DeployingAnOperator;

/// docs/envtest.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/envtest.md")]
pub struct Envtest;

/// docs/getting-started.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/getting-started.md")]
pub struct GettingStarted;

/// docs/multicluster.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/multicluster.md")]
pub struct Multicluster;

/// docs/operating.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/operating.md")]
pub struct Operating;

/// docs/read-your-writes.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/read-your-writes.md")]
pub struct ReadYourWrites;

/// docs/sharding.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/sharding.md")]
pub struct Sharding;

/// docs/webhooks-and-certificates.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/webhooks-and-certificates.md")]
pub struct WebhooksAndCertificates;

/// docs/writing-an-operator.md.
#[cfg(doctest)]
#[doc = include_str!("../../docs/writing-an-operator.md")]
pub struct WritingAnOperator;
