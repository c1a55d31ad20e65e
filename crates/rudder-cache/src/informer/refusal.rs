//! [`Refusal`]: the API server refusing an informer's list or watch (401 Unauthorized, 403
//! Forbidden), and how it is recognised in an error.
//!
//! A refusal is an answer about who asks, not a fault of the connection: retrying the same
//! request with the same identity gets the same answer until the RBAC (or the credentials)
//! change. So an informer reports it to whoever waits for its sync at once
//! ([`SyncError::Refused`](crate::SyncError::Refused)) instead of letting the wait run out,
//! logs it once per streak of refusals rather than once per retry, and keeps retrying in the
//! background with the engine's backoff, since RBAC may be granted later. The list/watch
//! engine (`watch/`) hands a refusal over as [`watch::Error::Refused`](crate::watch::Error::Refused),
//! so the informer's own line is the only one logged at `warn`.

/// The API server refused a list or a watch with 401 Unauthorized or 403 Forbidden: the
/// identity the client acts as may not list or watch the resource there (its RBAC lacks
/// the rule), or its credentials were not accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
#[non_exhaustive]
pub struct Refusal {
    /// The HTTP status: 401 or 403.
    pub code: u16,
    /// The answer's reason (`Forbidden`, `Unauthorized`).
    pub reason: String,
    /// The answer's message, which names the user, the verb and the resource (`configmaps
    /// is forbidden: User "..." cannot list resource "configmaps" in API group "" in the
    /// namespace "ops"`).
    pub message: String,
}

impl Refusal {
    /// Whether `code` is a refusal's: 401 or 403.
    pub fn is_refusal(code: u16) -> bool {
        matches!(code, 401 | 403)
    }

    /// The refusal a client error reports, if it is one: a 401 or 403 answer.
    pub fn of_kube_error(error: &kube::Error) -> Option<Self> {
        match error {
            kube::Error::Api(status) => Self::of_status(status),
            _ => None,
        }
    }

    /// The refusal `status` is, if its code is 401 or 403.
    pub(crate) fn of_status(status: &kube::core::Status) -> Option<Self> {
        Self::is_refusal(status.code).then(|| Self::from_status(status))
    }

    fn from_status(status: &kube::core::Status) -> Self {
        Self {
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn status(code: u16) -> kube::core::Status {
        kube::core::Status {
            code,
            reason: "Forbidden".to_owned(),
            message: "configmaps is forbidden".to_owned(),
            ..kube::core::Status::default()
        }
    }

    #[test]
    fn a_401_or_403_is_a_refusal_in_every_form_and_other_answers_are_not() {
        let api = |code| kube::Error::Api(Box::new(status(code)));
        let refused = Refusal::of_kube_error(&api(403));
        assert_eq!(refused.unwrap().message, "configmaps is forbidden");
        assert!(Refusal::of_kube_error(&api(401)).is_some());
        for code in [404, 410, 422, 500] {
            assert!(Refusal::of_kube_error(&api(code)).is_none());
        }
    }
}
