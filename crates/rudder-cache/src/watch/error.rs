//! [`Error`]: what goes wrong in a list or a watch that the engine does not handle itself.

use std::time::Duration;

use crate::Refusal;

/// A failure of the engine's lists and watches that it reports rather than handles. The
/// engine itself handles what has one right answer: a `404` (the resource is not served, a
/// state: [`Informer::resource_served`](crate::Informer::resource_served)), a `410 Gone` (relist), a streaming
/// list refused with `400` or `422` (list in pages). After every error here it retries on
/// its own, after a [`Backoff`](rudder_core::backoff::Backoff) wait (a [`Decode`](Self::Decode)
/// error needs none: the watch goes on); none ends the stream.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server refused the list or watch (401, 403): the identity lacks RBAC for it, or
    /// its credentials were refused. Retrying helps once the RBAC is granted.
    #[error("refused: {0}")]
    Refused(#[from] Refusal),
    /// An object did not decode into the Rust type (a strict decode; a lenient one skips
    /// such objects instead). Retrying the same list does not help.
    #[error("an object does not decode")]
    Decode(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The server answered with an error status the engine has no rule for (a `500`, a
    /// `429` past the client's retries, ...). Retrying may help.
    #[error("the server answered {code} {reason}: {message}")]
    Api {
        /// The HTTP status code (or the `code` of an `ERROR` event).
        code: u16,
        /// The status's reason (`InternalError`, `TooManyRequests`).
        reason: String,
        /// The status's message.
        message: String,
    },
    /// The request could not be sent, or its answer not read (a connection refused or
    /// reset, TLS, authentication by an exec plugin). Retrying may help.
    #[error("the request failed")]
    Request(#[source] kube::Error),
    /// A watch sent nothing, not even a bookmark, for this long: it is taken for dead,
    /// dropped and resumed from the last resourceVersion seen.
    #[error("the watch sent nothing for {0:?}, not even a bookmark")]
    Silent(Duration),
    /// A list answer carried no resourceVersion to watch from. Retrying may help.
    #[error("the list's answer has no resourceVersion")]
    NoResourceVersion,
}

impl Refusal {
    /// The refusal an engine error reports, if it is one.
    pub fn of_watch_error(error: &Error) -> Option<Self> {
        match error {
            Error::Refused(refusal) => Some(refusal.clone()),
            _ => None,
        }
    }
}

impl Error {
    /// Whether this is an object that did not decode.
    pub fn is_decode(&self) -> bool {
        matches!(self, Self::Decode(_))
    }

    /// `error`, from kube-client, as the engine reports it. kube-client reports a watch line
    /// that is not a `WatchEvent<K>` as a `SerdeError`, or, when the line happens to parse as
    /// a `Status` (every field of which is optional), as an API error with code 0, which a
    /// real status from the server never has: both are objects that did not decode.
    pub(crate) fn of_kube(error: kube::Error) -> Self {
        match error {
            kube::Error::SerdeError(_) => Self::Decode(Box::new(error)),
            kube::Error::Api(ref status) if status.code == 0 => Self::Decode(Box::new(error)),
            kube::Error::Api(status) => match Refusal::of_status(&status) {
                Some(refusal) => Self::Refused(refusal),
                None => Self::Api {
                    code: status.code,
                    reason: status.reason,
                    message: status.message,
                },
            },
            other => Self::Request(other),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: "Forbidden".to_owned(),
            message: "configmaps is forbidden".to_owned(),
            ..kube::core::Status::default()
        }))
    }

    #[test]
    fn kube_errors_are_classified_by_what_helps() {
        assert!(matches!(Error::of_kube(api(403)), Error::Refused(r) if r.code == 403));
        assert_eq!(
            Refusal::of_watch_error(&Error::of_kube(api(403))).map(|r| r.code),
            Some(403)
        );
        for code in [404, 410, 422, 500] {
            assert!(Refusal::of_watch_error(&Error::of_kube(api(code))).is_none());
        }
        assert!(Refusal::of_watch_error(&Error::NoResourceVersion).is_none());
        assert!(matches!(Error::of_kube(api(401)), Error::Refused(_)));
        assert!(matches!(
            Error::of_kube(api(500)),
            Error::Api { code: 500, .. }
        ));
        assert!(Error::of_kube(api(0)).is_decode());
        let serde = serde_json::from_str::<u8>("x").unwrap_err();
        assert!(Error::of_kube(kube::Error::SerdeError(serde)).is_decode());
        assert!(matches!(
            Error::of_kube(kube::Error::LinesCodecMaxLineLengthExceeded),
            Error::Request(_)
        ));
    }
}
