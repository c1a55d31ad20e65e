//! Secure metrics: [`SecureMetrics`] (the option) and the tower service that lets a request
//! through only if the API server authenticates its bearer token (TokenReview) and authorizes
//! the user for the request's verb on its path (SubjectAccessReview), with cached decisions.
//!
//! By concern: `options.rs` ([`SecureMetrics`], its defaults and [`AuthStats`]),
//! `service.rs` (the filter in front of the metrics routes and its answers), `review.rs`
//! (the two reviews sent to the API server), `cache.rs` (decisions kept for a time, one
//! review in flight per key).

mod cache;
mod options;
mod review;
mod service;

pub(crate) use options::MetricsCertificate;
pub use options::{
    AuthStats, DEFAULT_ALLOWED_TTL, DEFAULT_CACHE_CAPACITY, DEFAULT_DENIED_TTL,
    DEFAULT_REVIEW_TIMEOUT, SecureMetrics,
};
pub use service::MAX_TOKEN_LENGTH;
