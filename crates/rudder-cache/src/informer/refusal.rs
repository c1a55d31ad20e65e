//! [`Refusal`]: the API server refusing an informer's list or watch (401 Unauthorized, 403
//! Forbidden), how it is recognised in a watcher error, and how the informers' client hands
//! it over.
//!
//! A refusal is an answer about who asks, not a fault of the connection: retrying the same
//! request with the same identity gets the same answer until the RBAC (or the credentials)
//! change. So an informer reports it to whoever waits for its sync at once
//! ([`SyncError::Refused`](crate::SyncError::Refused)) instead of letting the wait run out,
//! logs it once per streak of refusals rather than once per retry, and keeps retrying in the
//! background with the watcher's backoff, since RBAC may be granted later.
//!
//! kube-runtime's watcher logs every 401 and 403 answer itself, at `warn`, with a debug dump
//! of the error, before handing it on; the informer then logged it a second time. The
//! cache's informers list and watch through a client ([`most_recent_client`](crate::most_recent_client))
//! that hands such an answer over as a [`kube::Error::Service`] holding a [`Refusal`] instead
//! of a [`kube::Error::Api`]: the watcher reports that at `debug`, like any other error, and
//! the informer's own line is the only one at `warn`.

use http::Response;
use kube::client::Body;
use kube_runtime::watcher;

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

    /// The refusal a watcher error reports, if it is one: a 401 or 403 answer to a list or
    /// a watch, as a [`kube::Error::Api`] (an informer on any client) or as the
    /// [`kube::Error::Service`] the cache's informer client makes of it.
    pub fn of_watch_error(error: &watcher::Error) -> Option<Self> {
        match error {
            watcher::Error::InitialListFailed(error)
            | watcher::Error::WatchStartFailed(error)
            | watcher::Error::WatchFailed(error) => Self::of_kube_error(error),
            watcher::Error::WatchError(status) => {
                Self::is_refusal(status.code).then(|| Self::from_status(status))
            }
            _ => None,
        }
    }

    /// The refusal a client error reports, if it is one.
    pub fn of_kube_error(error: &kube::Error) -> Option<Self> {
        match error {
            kube::Error::Api(status) if Self::is_refusal(status.code) => {
                Some(Self::from_status(status))
            }
            kube::Error::Service(inner) => inner.downcast_ref::<Refusal>().cloned(),
            _ => None,
        }
    }

    fn from_status(status: &kube::core::Status) -> Self {
        Self {
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        }
    }

    /// The refusal `response` is, read from its body (a `Status`), if its status is 401 or
    /// 403; `Ok` with the response untouched otherwise.
    pub(crate) async fn from_response(response: Response<Body>) -> Result<Response<Body>, Self> {
        let code = response.status().as_u16();
        if !Self::is_refusal(code) {
            return Ok(response);
        }
        let reason = response
            .status()
            .canonical_reason()
            .unwrap_or_default()
            .to_owned();
        // The body is the server's own short `Status`; without one, the status line says it.
        let status = match response.into_body().collect_bytes().await {
            Ok(bytes) => serde_json::from_slice::<kube::core::Status>(&bytes).ok(),
            Err(_) => None,
        };
        Err(match status {
            Some(status) => Self {
                code,
                reason: if status.reason.is_empty() {
                    reason
                } else {
                    status.reason
                },
                message: status.message,
            },
            None => Self {
                code,
                message: reason.clone(),
                reason,
            },
        })
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
        let refused = Refusal::of_watch_error(&watcher::Error::InitialListFailed(api(403)));
        assert_eq!(refused.unwrap().message, "configmaps is forbidden");
        assert!(Refusal::of_watch_error(&watcher::Error::WatchStartFailed(api(401))).is_some());
        assert!(
            Refusal::of_watch_error(&watcher::Error::WatchError(Box::new(status(403)))).is_some()
        );
        let service = kube::Error::Service(Box::new(Refusal {
            code: 403,
            reason: "Forbidden".to_owned(),
            message: "m".to_owned(),
        }));
        assert_eq!(
            Refusal::of_watch_error(&watcher::Error::WatchFailed(service)).map(|r| r.code),
            Some(403)
        );
        for code in [404, 410, 422, 500] {
            assert!(
                Refusal::of_watch_error(&watcher::Error::InitialListFailed(api(code))).is_none()
            );
        }
        assert!(Refusal::of_watch_error(&watcher::Error::NoResourceVersion).is_none());
    }

    #[tokio::test]
    async fn a_refused_answer_becomes_a_refusal_with_its_status_and_others_pass() {
        let body = serde_json::to_vec(&serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "pods is forbidden: User \"op\" cannot list resource \"pods\"",
            "reason": "Forbidden", "code": 403,
        }))
        .unwrap();
        let answer = |code: u16, body: Vec<u8>| {
            Response::builder()
                .status(code)
                .body(Body::from(body))
                .unwrap()
        };
        let refusal = Refusal::from_response(answer(403, body)).await.unwrap_err();
        assert_eq!(refusal.code, 403);
        assert_eq!(refusal.reason, "Forbidden");
        assert!(
            refusal.message.starts_with("pods is forbidden"),
            "{refusal}"
        );
        let bare = Refusal::from_response(answer(401, b"no".to_vec()))
            .await
            .unwrap_err();
        assert_eq!((bare.code, bare.reason.as_str()), (401, "Unauthorized"));
        let ok = Refusal::from_response(answer(200, b"{}".to_vec()))
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
    }
}
