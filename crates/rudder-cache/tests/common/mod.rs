//! Helpers shared by the integration tests: a watch-counting, gateable client layer and
//! event helpers.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use rudder_cache::EventStream;
use rudder_core::Event;
use tokio::sync::watch;

/// A tower layer that counts watch requests (`watch=true` in the query) and can hold them
/// back: while the gate is closed, watch requests (and, after [`hold_lists`](Self::hold_lists),
/// lists too) wait before reaching the API server.
#[derive(Clone)]
pub struct WatchGate {
    watches: Arc<AtomicUsize>,
    waiting: Arc<AtomicUsize>,
    open: Arc<watch::Sender<bool>>,
    lists: Arc<AtomicBool>,
    /// Every request's path and query, in order.
    requests: Arc<Mutex<Vec<String>>>,
    /// Set by [`as_old_server`](Self::as_old_server).
    old_server: Arc<AtomicBool>,
}

impl Default for WatchGate {
    fn default() -> Self {
        Self {
            watches: Arc::default(),
            waiting: Arc::default(),
            open: Arc::new(watch::channel(true).0),
            lists: Arc::default(),
            requests: Arc::default(),
            old_server: Arc::default(),
        }
    }
}

impl WatchGate {
    /// A client for `config` whose requests go through this layer.
    pub fn client(&self, config: &kube::Config) -> kube::Client {
        kube::client::ClientBuilder::try_from(config.clone())
            .unwrap()
            .with_layer(self)
            .build()
    }

    /// Watches opened so far: watch requests the server accepted.
    pub fn watches(&self) -> usize {
        self.watches.load(Ordering::SeqCst)
    }

    /// Watch requests held at the closed gate right now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    pub fn close(&self) {
        self.open.send_replace(false);
    }

    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// Every request so far, as path and query.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// Makes the API server look like one from before streaming lists: `sendInitialEvents`,
    /// `resourceVersionMatch` and `allowWatchBookmarks` are dropped from watch requests, so
    /// a streaming list's watch from resourceVersion 0 gets the current objects as ADDED
    /// events and then no end-of-initial-events bookmark, as such a server answers. (A
    /// current server asked for bookmarks ends even a plain watch from version 0's
    /// synthetic ADDED events with that bookmark.)
    pub fn as_old_server(&self) {
        self.old_server.store(true, Ordering::SeqCst);
    }

    /// Holds lists (GET requests without a name, so an informer cannot sync) at the closed
    /// gate as well as watches.
    pub fn hold_lists(&self) {
        self.lists.store(true, Ordering::SeqCst);
    }
}

impl<S> tower::Layer<S> for WatchGate {
    type Service = Gated<S>;

    fn layer(&self, inner: S) -> Gated<S> {
        Gated {
            inner: Arc::new(tokio::sync::Mutex::new(inner)),
            gate: self.clone(),
        }
    }
}

/// The service under a mutex, as kube's inner service is not `Clone`; it is held only to
/// dispatch a request, not while its response is awaited.
pub struct Gated<S> {
    inner: Arc<tokio::sync::Mutex<S>>,
    gate: WatchGate,
}

impl<S, B, RB> tower::Service<http::Request<B>> for Gated<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>> + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if self.gate.old_server.load(Ordering::SeqCst) {
            *req.uri_mut() = without_initial_events(req.uri());
        }
        if let Some(path) = req.uri().path_and_query() {
            self.gate.requests.lock().unwrap().push(path.to_string());
        }
        let is_watch = req
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true"));
        let held_list = self.gate.lists.load(Ordering::SeqCst)
            && req.method() == http::Method::GET
            && req.uri().path().ends_with("/configmaps");
        let inner = Arc::clone(&self.inner);
        let gate = self.gate.clone();
        Box::pin(async move {
            if is_watch || held_list {
                let mut open = gate.open.subscribe();
                // Counted down however the wait ends: the request is dropped when its
                // informer stops.
                let _waiting = Waiting::new(&gate.waiting);
                let _ = open.wait_for(|o| *o).await;
            }
            let response = {
                let mut inner = inner.lock().await;
                futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                inner.call(req)
            };
            let response = response.await?;
            // A watch the server refused (a streaming list on a server without them) opened
            // nothing.
            if is_watch && response.status().is_success() {
                gate.watches.fetch_add(1, Ordering::SeqCst);
            }
            Ok(response)
        })
    }
}

/// An informer of the ConfigMaps in `namespace` through this gate's client, configured by
/// `configure`, started and synced.
pub async fn synced_informer(
    gate: &WatchGate,
    config: &kube::Config,
    namespace: &str,
    configure: impl FnOnce(
        rudder_cache::InformerBuilder<ConfigMap>,
    ) -> rudder_cache::InformerBuilder<ConfigMap>,
) -> rudder_cache::Informer<ConfigMap> {
    let api = kube::Api::<ConfigMap>::namespaced(gate.client(config), namespace);
    let informer = configure(rudder_cache::Informer::builder(api)).start();
    informer
        .wait_for_sync(Duration::from_secs(30))
        .await
        .unwrap();
    informer
}

/// `uri` without the query parameters a server older than streaming lists does not know.
fn without_initial_events(uri: &http::Uri) -> http::Uri {
    let Some(query) = uri.query() else {
        return uri.clone();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| {
            !p.starts_with("sendInitialEvents=")
                && !p.starts_with("resourceVersionMatch=")
                && !p.starts_with("allowWatchBookmarks=")
        })
        .collect();
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(
        format!("{}?{}", uri.path(), kept.join("&"))
            .parse()
            .unwrap(),
    );
    http::Uri::from_parts(parts).unwrap()
}

/// One request waiting at the gate, for as long as it lives.
struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(count))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A ConfigMap named `name` with `labels` and a little data.
pub fn config_map(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..Default::default()
    }
}

/// The next event, or a panic after 20 s.
pub async fn next<K>(events: &mut EventStream<K>) -> Event<K> {
    tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("no event within 20 s")
        .expect("event stream ended")
}

/// A short description of an event, for comparing sequences.
pub fn describe<K: kube::Resource>(event: &Event<K>) -> String {
    let name = |o: &K| o.meta().name.clone().unwrap_or_default();
    match event {
        Event::Create {
            object,
            initial_list,
        } => format!("add {} initial={initial_list}", name(object)),
        Event::Update { old, new } => {
            let rv_changed = old.meta().resource_version != new.meta().resource_version;
            format!("update {} changed={rv_changed}", name(new))
        }
        Event::Delete {
            object,
            final_state_unknown,
        } => {
            format!("delete {} unknown={final_state_unknown}", name(object))
        }
        Event::Generic { object } => format!("generic {}", name(object)),
    }
}

/// The next `n` events, described.
pub async fn take<K: kube::Resource>(events: &mut EventStream<K>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(describe(&next(events).await));
    }
    out
}

/// A namespace of its own on the shared control plane, holding a ConfigMap (no labels) for
/// each of `names`, and the ConfigMap API in it.
pub async fn namespace_with(
    hint: &str,
    names: &[&str],
) -> (rudder_envtest::TestNamespace, kube::Api<ConfigMap>) {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace(hint).await.unwrap();
    // On a most-recent client, as the cache's informers are: a bare informer's streaming list
    // would otherwise ask for any state, and could sync without the objects made here.
    let api = api::<ConfigMap>(&ns);
    for name in names {
        api.create(&kube::api::PostParams::default(), &config_map(name, &[]))
            .await
            .unwrap();
    }
    (ns, api)
}

/// The `K` API in `ns` on the namespace's plain client: the engine's lists are consistent
/// on any client, so a bare informer on it never syncs without an object written before it
/// started.
pub fn api<K>(ns: &rudder_envtest::TestNamespace) -> kube::Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    kube::Api::namespaced(ns.client(), ns.name())
}
