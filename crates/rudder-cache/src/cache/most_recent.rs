//! The client the cache's informers watch with: streaming lists start at the most recent
//! state, as client-go's reflector starts them.
//!
//! kube-runtime's watcher opens a streaming list with `resourceVersion=0` and
//! `resourceVersionMatch=NotOlderThan`, which the API server may answer from a watch cache
//! that has not yet seen the latest writes: an informer could then sync without an object
//! written just before it started (it arrives a moment later, as an add). client-go asks with
//! no `resourceVersion` ("most recent": the server waits until its cache is current, a
//! consistent read). This client drops `resourceVersion=0` from a watch that asks for initial
//! events, so the cache's informers sync on a state at least as new as their start, as a
//! paginated list (which reads the latest state) does.
//!
//! It also hands a 401 or 403 answer over as an error holding a
//! [`Refusal`](crate::Refusal) rather than as an API error, so that kube-runtime's watcher,
//! which logs each API error of those codes at `warn` with a debug dump, reports it at
//! `debug` and the informer's own line is the one at `warn` (see `informer/refusal.rs`).

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Request, Response, Uri};
use kube::Client;
use kube::client::Body;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// `client`, with streaming lists asking for the most recent state: a watch that asks for
/// initial events (`sendInitialEvents=true`) is sent without `resourceVersion=0`, so the
/// server answers once its watch cache has caught up with the latest write, as for
/// client-go's reflector. A 401 Unauthorized or 403 Forbidden answer comes back as a
/// [`kube::Error::Service`] holding a [`Refusal`](crate::Refusal) (the answer's code,
/// reason and message) instead of a [`kube::Error::Api`]: an informer reports it once per
/// streak and to whoever waits for its sync ([`SyncError::Refused`](crate::SyncError::Refused)),
/// where kube-runtime's watcher would log each one at `warn` as well. Every other request and
/// answer goes through unchanged. The cache's informers
/// watch through such a client; build the `Api` of an informer of your own
/// ([`Informer::builder`](crate::Informer::builder)) on one for the same guarantee: it never
/// syncs without an object written before it started. Needs a Tokio runtime
/// ([`Client::new`] spawns its request buffer).
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// let api: kube::Api<ConfigMap> =
///     kube::Api::namespaced(rudder_cache::most_recent_client(client), "default");
/// let informer = rudder_cache::Informer::builder(api).start();
/// # }
/// ```
pub fn most_recent(client: Client) -> Client {
    layered(client, None)
}

/// [`most_recent`], its request buffer's task joined through `owner`'s tracker: the task
/// holds the layer, and the layer `owner`, until it ends (once the last clone of the result
/// is dropped), so whoever waits for that tracker waits for the task too (DESIGN 16).
pub(crate) fn most_recent_tracked(client: Client, owner: TaskTrackerToken) -> Client {
    layered(client, Some(owner))
}

fn layered(client: Client, owner: Option<TaskTrackerToken>) -> Client {
    let namespace = client.default_namespace().to_owned();
    let valid_until = *client.valid_until();
    let layer = MostRecent {
        inner: client,
        _owner: owner,
    };
    Client::new(layer, namespace).with_valid_until(valid_until)
}

/// The layer [`most_recent`] puts in front of a client.
#[derive(Clone)]
struct MostRecent {
    inner: Client,
    /// Held by the request buffer's task (which owns the layer) while it runs.
    _owner: Option<TaskTrackerToken>,
}

impl tower_service::Service<Request<Body>> for MostRecent {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The inner client buffers (and waits for readiness) on its own.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        if let Some(uri) = rewritten(request.uri()) {
            *request.uri_mut() = uri;
        }
        let inner = self.inner.clone();
        Box::pin(async move {
            let response = inner.send(request).await?;
            crate::Refusal::from_response(response)
                .await
                .map_err(|refusal| kube::Error::Service(Box::new(refusal)))
        })
    }
}

/// `uri` without `resourceVersion=0` when it asks for initial events; `None` to leave it.
fn rewritten(uri: &Uri) -> Option<Uri> {
    let query = uri.query()?;
    let pairs: Vec<&str> = query.split('&').collect();
    if !pairs.contains(&"sendInitialEvents=true") || !pairs.contains(&"resourceVersion=0") {
        return None;
    }
    let kept: Vec<&str> = pairs
        .into_iter()
        .filter(|pair| *pair != "resourceVersion=0")
        .collect();
    let path_and_query = format!("{}?{}", uri.path(), kept.join("&"));
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().ok()?);
    Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_streaming_list_asks_for_the_most_recent_state_and_nothing_else_changes() {
        let streaming: Uri = "https://api:6443/api/v1/namespaces/ns/configmaps?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0"
            .parse()
            .unwrap();
        let rewritten = rewritten(&streaming).unwrap();
        assert_eq!(
            rewritten.to_string(),
            "https://api:6443/api/v1/namespaces/ns/configmaps?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        );
        // A resumed watch, a paginated list, a get: left alone.
        for other in [
            "https://api:6443/api/v1/configmaps?&watch=true&allowWatchBookmarks=true&resourceVersion=42",
            "https://api:6443/api/v1/configmaps?&limit=500&resourceVersion=0",
            "https://api:6443/api/v1/namespaces/ns/configmaps/a",
        ] {
            assert!(rewritten_is_none(other), "{other}");
        }
    }

    fn rewritten_is_none(uri: &str) -> bool {
        rewritten(&uri.parse().unwrap()).is_none()
    }
}
