//! Secure metrics against a real API server: HTTPS, bearer tokens reviewed by the API server
//! (TokenReview, SubjectAccessReview), cached decisions, and bad clients.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rudder_envtest::poll::eventually;
use rudder_envtest::{TestEnv, TestNamespace};
use rudder_manager::{Manager, SecureMetrics};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

const LOOPBACK_ANY_PORT: Option<SocketAddr> = Some(SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
    0,
));

/// How long a test waits for the manager to do something.
const WAIT: Duration = Duration::from_secs(30);

/// A CA and a serving pair for `localhost` and `127.0.0.1` in `tls.crt`/`tls.key` in a
/// directory of its own, removed on drop.
struct Certificates {
    ca: CertificateDer<'static>,
    dir: PathBuf,
}

impl Certificates {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap().der().clone();
        let issuer = Issuer::new(params, ca_key);
        let serving =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = serving.signed_by(&key, &issuer).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "rudder-secure-metrics-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
        Self { ca, dir }
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn tls(&self) -> TlsConnector {
        TlsConnector::from(rudder_envtest::tls::client_config([self.ca.clone()]).unwrap())
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Counts the requests the manager's client makes for TokenReviews and SubjectAccessReviews.
#[derive(Clone, Default)]
struct ReviewCounter {
    token_reviews: Arc<AtomicUsize>,
    access_reviews: Arc<AtomicUsize>,
}

impl ReviewCounter {
    fn client(&self, config: &kube::Config) -> kube::Client {
        kube::client::ClientBuilder::try_from(config.clone())
            .unwrap()
            .with_layer(self)
            .build()
    }

    fn counts(&self) -> (usize, usize) {
        (
            self.token_reviews.load(Ordering::SeqCst),
            self.access_reviews.load(Ordering::SeqCst),
        )
    }
}

impl<S> tower::Layer<S> for ReviewCounter {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            counter: self.clone(),
        }
    }
}

struct Counted<S> {
    inner: S,
    counter: ReviewCounter,
}

impl<S, B> tower::Service<Request<B>> for Counted<S>
where
    S: tower::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> S::Future {
        let path = request.uri().path();
        if path.ends_with("/tokenreviews") {
            self.counter.token_reviews.fetch_add(1, Ordering::SeqCst);
        } else if path.ends_with("/subjectaccessreviews") {
            self.counter.access_reviews.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.call(request)
    }
}

/// A manager serving secure metrics (and an extra handler at `/debug/extra`) with `secure`,
/// reviewing with `client`, started until the returned token is cancelled.
struct Running {
    manager: Arc<Manager>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), rudder_manager::Error>>,
    metrics: SocketAddr,
    health: SocketAddr,
}

impl Running {
    async fn start(ns: &TestNamespace, client: kube::Client, secure: SecureMetrics) -> Self {
        let namespace = ns.name().to_owned();
        let manager = Arc::new(
            Manager::builder(client)
                .health_probe_address(LOOPBACK_ANY_PORT)
                .metrics_address(LOOPBACK_ANY_PORT)
                .secure_metrics(secure)
                .metrics_extra_handler("/debug/extra", |_request| async {
                    http::Response::new("extra\n")
                })
                .cache(move |c| c.default_namespace(namespace))
                .build()
                .unwrap(),
        );
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (manager, stop) = (Arc::clone(&manager), stop.clone());
            async move { manager.start(stop).await }
        });
        let metrics = eventually("the metrics server", WAIT, async || {
            manager.metrics_address()
        })
        .await;
        let health = eventually("the probe server", WAIT, async || manager.health_address()).await;
        Self {
            manager,
            stop,
            task,
            metrics,
            health,
        }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap().unwrap();
        drop(self.manager);
    }
}

/// An HTTPS/1.1 connection to the metrics server.
struct Scraper {
    sender: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
}

impl Scraper {
    async fn connect(addr: SocketAddr, tls: &TlsConnector) -> Self {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let stream = tls
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        Self { sender }
    }

    /// GETs `path` with `authorization` as the header (if any).
    async fn get_with(
        &mut self,
        path: &str,
        authorization: Option<HeaderValue>,
    ) -> (StatusCode, HeaderMap, String) {
        self.sender.ready().await.unwrap();
        let mut request = Request::get(path).header(header::HOST, "localhost");
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        let response = self
            .sender
            .send_request(request.body(Empty::new()).unwrap())
            .await
            .unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    /// GETs `path` with `token` as a bearer token (if any).
    async fn get(&mut self, path: &str, token: Option<&str>) -> (StatusCode, HeaderMap, String) {
        let value = token.map(|t| HeaderValue::from_str(&format!("Bearer {t}")).unwrap());
        self.get_with(path, value).await
    }
}

/// `GET path` over plain HTTP/1.0: the status, or `None` if no HTTP answer came.
async fn plain_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        rudder_envtest::http::get(addr, path),
    )
    .await;
    Some(answer.ok()?.ok()?.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_authenticated_and_authorized_callers_read_metrics() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("secure-metrics-access").await.unwrap();
    let prometheus = ns.service_account("prometheus").await.unwrap();
    let nobody = ns.service_account("nobody").await.unwrap();
    ns.grant_non_resource_urls(&prometheus, &["get"], &["/metrics"])
        .await
        .unwrap();
    let certs = Certificates::new();
    let running = Running::start(&ns, ns.client(), SecureMetrics::files(certs.dir())).await;
    let mut scraper = Scraper::connect(running.metrics, &certs.tls()).await;

    let (status, headers, body) = scraper.get("/metrics", Some(prometheus.token())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        headers[header::CONTENT_TYPE],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert!(body.contains("# TYPE process_open_fds gauge"), "{body}");

    let (status, headers, _) = scraper.get("/metrics", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");

    let (status, headers, _) = scraper.get("/metrics", Some("not-a-token")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");

    let (status, _, body) = scraper.get("/metrics", Some(nobody.token())).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains(&nobody.username()), "{body}");

    // Extra handlers are authorized by their own path: /metrics alone does not cover them.
    let (status, _, _) = scraper.get("/debug/extra", Some(prometheus.token())).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    ns.grant_non_resource_urls(&nobody, &["get"], &["/debug/extra"])
        .await
        .unwrap();
    let (status, _, body) = scraper.get("/debug/extra", Some(nobody.token())).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "extra\n"));

    // Probes stay plain HTTP, and the metrics port does not answer plain HTTP.
    assert_eq!(plain_status(running.health, "/readyz").await, Some(200));
    assert_eq!(plain_status(running.metrics, "/metrics").await, None);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_scrapes_costs_one_review_of_each_kind() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("secure-metrics-burst").await.unwrap();
    let prometheus = ns.service_account("prometheus").await.unwrap();
    ns.grant_non_resource_urls(&prometheus, &["get"], &["/metrics"])
        .await
        .unwrap();
    let certs = Certificates::new();
    let counter = ReviewCounter::default();
    let secure = SecureMetrics::files(certs.dir());
    let running = Running::start(&ns, counter.client(env.config()), secure.clone()).await;
    let tls = certs.tls();

    // Concurrent first, on a cold cache: 1000 scrapes over 50 connections at once; the
    // first requests all wait for the same reviews.
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let (addr, tls, token) = (running.metrics, tls.clone(), prometheus.token().to_owned());
        tasks.spawn(async move {
            let mut scraper = Scraper::connect(addr, &tls).await;
            for _ in 0..20 {
                let (status, _, body) = scraper.get("/metrics", Some(&token)).await;
                assert_eq!(status, StatusCode::OK, "{body}");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let concurrent = counter.counts();
    let concurrent_took = started.elapsed();

    // Then 1000 in a row on one connection.
    let started = tokio::time::Instant::now();
    let mut scraper = Scraper::connect(running.metrics, &tls).await;
    for _ in 0..1000 {
        let (status, _, body) = scraper.get("/metrics", Some(prometheus.token())).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let total = counter.counts();
    let sequential_took = started.elapsed();
    eprintln!(
        "reviews (token, access): after 1000 concurrent scrapes in {concurrent_took:?}: \
         {concurrent:?}; after 1000 more in a row in {sequential_took:?}: {total:?}"
    );
    // One review of each kind, plus one more per 10 s the burst lasted (the cache's TTL).
    let refreshes = |took: Duration| usize::try_from(took.as_secs() / 10).unwrap();
    let during_burst = 1 + refreshes(concurrent_took);
    assert!(
        (1..=during_burst).contains(&concurrent.0) && (1..=during_burst).contains(&concurrent.1),
        "single flight on a cold cache: {concurrent:?} in {concurrent_took:?}"
    );
    let refreshes = refreshes(concurrent_took + sequential_took);
    assert!(
        total.0 <= 1 + refreshes && total.1 <= 1 + refreshes,
        "{total:?}"
    );
    let stats = secure.stats();
    assert_eq!(
        (stats.token_reviews, stats.access_reviews),
        (total.0 as u64, total.1 as u64),
        "the filter's own counts agree with the client's"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_never_crashes_the_endpoint_or_grows_its_cache() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("secure-metrics-bad-input").await.unwrap();
    let prometheus = ns.service_account("prometheus").await.unwrap();
    let gone = ns.service_account("gone").await.unwrap();
    ns.grant_non_resource_urls(&prometheus, &["get"], &["/metrics"])
        .await
        .unwrap();
    ns.grant_non_resource_urls(&gone, &["get"], &["/metrics"])
        .await
        .unwrap();
    // A token whose service account has since been deleted: no longer valid.
    kube::Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(ns.client(), ns.name())
        .delete("gone", &Default::default())
        .await
        .unwrap();
    let certs = Certificates::new();
    let secure = SecureMetrics::files(certs.dir()).cache_capacity(64);
    let running = Running::start(&ns, ns.client(), secure.clone()).await;
    let addr = running.metrics;
    let tls = certs.tls();

    // Garbage instead of a TLS handshake, and plain HTTP to the TLS port.
    for n in 0..20u8 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let garbage: Vec<u8> = (0..500u16)
            .map(|i| (i as u8).wrapping_mul(37) ^ n)
            .collect();
        let _ = stream.write_all(&garbage).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await;
        assert!(!String::from_utf8_lossy(&answer).contains("process_"));
    }
    assert_eq!(plain_status(addr, "/metrics").await, None);

    // Malformed, stale and huge tokens.
    let mut scraper = Scraper::connect(addr, &tls).await;
    let (status, _, _) = scraper.get("/metrics", Some(gone.token())).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "a deleted account's token"
    );
    let reviews_before = secure.stats().token_reviews;
    for value in [
        &b"Bearer"[..],
        b"Bearer ",
        b"Basic dXNlcjpwYXNz",
        b"Bearer a b",
        b"Bearer \xff\xfe\xfd",
        b"bearer\ttoken",
    ] {
        let value = HeaderValue::from_bytes(value).unwrap();
        let (status, _, _) = scraper.get_with("/metrics", Some(value.clone())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{value:?}");
    }
    let huge = "x".repeat(100 * 1024);
    let (status, _, _) = scraper.get("/metrics", Some(&huge)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        secure.stats().token_reviews,
        reviews_before,
        "malformed and oversized tokens are refused without a review"
    );
    let (status, _, _) = scraper
        .get("/metrics", Some("eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjF9.c2ln"))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a forged, expired JWT");

    // 1000 distinct garbage tokens over 10 connections: each is refused, and the cache
    // stays within its capacity throughout.
    let mut tasks = tokio::task::JoinSet::new();
    for connection in 0..10 {
        let (tls, secure) = (tls.clone(), secure.clone());
        tasks.spawn(async move {
            let mut scraper = Scraper::connect(addr, &tls).await;
            for n in 0..100 {
                let token = format!("garbage-{connection}-{n}");
                let (status, _, _) = scraper.get("/metrics", Some(&token)).await;
                assert_eq!(status, StatusCode::UNAUTHORIZED);
                assert!(secure.stats().cached_tokens <= 64, "{:?}", secure.stats());
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let stats = secure.stats();
    assert!(
        stats.cached_tokens <= 64 && stats.cached_access <= 64,
        "{stats:?}"
    );

    // The endpoint still serves, over fresh connections, and the probes answer.
    let mut scraper = Scraper::connect(addr, &tls).await;
    let (status, _, body) = scraper.get("/metrics", Some(prometheus.token())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(plain_status(running.health, "/readyz").await, Some(200));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_reviews_answer_500_and_are_not_cached() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("secure-metrics-failures").await.unwrap();
    let prometheus = ns.service_account("prometheus").await.unwrap();
    ns.grant_non_resource_urls(&prometheus, &["get"], &["/metrics"])
        .await
        .unwrap();
    // The manager runs as a service account that may not create reviews.
    let operator = ns.service_account("operator-without-rbac").await.unwrap();
    let certs = Certificates::new();
    let secure = SecureMetrics::files(certs.dir());
    let running = Running::start(&ns, operator.client(), secure.clone()).await;
    let mut scraper = Scraper::connect(running.metrics, &certs.tls()).await;
    for attempt in 1..=3 {
        let (status, _, body) = scraper.get("/metrics", Some(prometheus.token())).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        let stats = secure.stats();
        assert_eq!(stats.token_reviews, attempt, "each request asks again");
        assert_eq!(stats.cached_tokens, 0);
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_certificate_fails_the_start() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("secure-metrics-no-cert").await.unwrap();
    let manager = Manager::builder(ns.client())
        .health_probe_address(None)
        .metrics_address(LOOPBACK_ANY_PORT)
        .secure_metrics(SecureMetrics::files("/nonexistent/rudder-metrics-certs"))
        .build()
        .unwrap();
    let error = manager.start(CancellationToken::new()).await.unwrap_err();
    assert!(
        matches!(
            error,
            rudder_manager::Error::SecureMetrics {
                source: rudder_manager::SecureMetricsError::Certificate(_),
                ..
            }
        ),
        "{error:?}"
    );
}

/// The end-entity certificate a fresh TLS connection to `addr` is served.
async fn served_certificate(addr: SocketAddr, tls: &TlsConnector) -> Option<Vec<u8>> {
    let tcp = TcpStream::connect(addr).await.ok()?;
    let stream = tls
        .connect(ServerName::try_from("localhost").ok()?, tcp)
        .await
        .ok()?;
    let chain = stream.get_ref().1.peer_certificates()?;
    chain.first().map(|cert| cert.as_ref().to_vec())
}

/// A new serving pair from a new CA, as PEM, and a connector trusting that CA.
fn new_pair() -> (String, String, TlsConnector) {
    let certs = Certificates::new();
    let cert = std::fs::read_to_string(certs.dir().join("tls.crt")).unwrap();
    let key = std::fs::read_to_string(certs.dir().join("tls.key")).unwrap();
    (cert, key, certs.tls())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_certificate_is_served_without_a_restart() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("secure-metrics-rotation").await.unwrap();
    let prometheus = ns.service_account("prometheus").await.unwrap();
    ns.grant_non_resource_urls(&prometheus, &["get"], &["/metrics"])
        .await
        .unwrap();

    // From a certificate store another source fills (the self-signed source's way in),
    // empty when the manager starts: handshakes fail until it is filled.
    let (cert, key, first_tls) = new_pair();
    let store = rudder_webhook::CertificateStore::new();
    let running = Running::start(
        &ns,
        ns.client(),
        SecureMetrics::certificate_store(store.clone()),
    )
    .await;
    assert_eq!(served_certificate(running.metrics, &first_tls).await, None);
    store.set_pem(cert.as_bytes(), key.as_bytes()).unwrap();
    let mut scraper = Scraper::connect(running.metrics, &first_tls).await;
    let (status, _, body) = scraper.get("/metrics", Some(prometheus.token())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (cert, key, second_tls) = new_pair();
    store.set_pem(cert.as_bytes(), key.as_bytes()).unwrap();
    let mut scraper = Scraper::connect(running.metrics, &second_tls).await;
    let (status, _, body) = scraper.get("/metrics", Some(prometheus.token())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    running.stop().await;

    // From files, read again while the server runs.
    let certs = Certificates::new();
    let secure = SecureMetrics::files(certs.dir()).cert_poll_period(Duration::from_millis(50));
    let running = Running::start(&ns, ns.client(), secure).await;
    let before = served_certificate(running.metrics, &certs.tls())
        .await
        .unwrap();
    let (cert, key, tls) = new_pair();
    std::fs::write(certs.dir().join("tls.key"), &key).unwrap();
    std::fs::write(certs.dir().join("tls.crt"), &cert).unwrap();
    let after = eventually("the new certificate to be served", WAIT, async || {
        served_certificate(running.metrics, &tls).await
    })
    .await;
    assert_ne!(before, after);
    let mut scraper = Scraper::connect(running.metrics, &tls).await;
    let (status, _, body) = scraper.get("/metrics", Some(prometheus.token())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    running.stop().await;
}

/// With secure metrics on, the profiling server is served as the metrics are: HTTPS, and
/// only a caller allowed `get` on its path (`/debug/pprof/*`) is answered.
#[cfg(feature = "profiling")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_are_behind_the_same_reviews_as_metrics() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("secure-profiles").await.unwrap();
    let profiler = ns.service_account("profiler").await.unwrap();
    let prometheus = ns.service_account("prometheus").await.unwrap();
    ns.grant_non_resource_urls(&profiler, &["get"], &["/debug/pprof/*"])
        .await
        .unwrap();
    ns.grant_non_resource_urls(&prometheus, &["get"], &["/metrics"])
        .await
        .unwrap();
    let certs = Certificates::new();
    let namespace = ns.name().to_owned();
    let manager = Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(None)
            .metrics_address(LOOPBACK_ANY_PORT)
            .profiling_address(LOOPBACK_ANY_PORT)
            .secure_metrics(SecureMetrics::files(certs.dir()))
            .cache(move |c| c.default_namespace(namespace))
            .build()
            .unwrap(),
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (manager, stop) = (Arc::clone(&manager), stop.clone());
        async move { manager.start(stop).await }
    });
    let addr = eventually("the profiling server", WAIT, async || {
        manager.profiling_address()
    })
    .await;
    let mut client = Scraper::connect(addr, &certs.tls()).await;
    let (status, headers, _) = client.get("/debug/pprof/", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");
    let (status, _, body) = client
        .get("/debug/pprof/profile?seconds=1", Some(prometheus.token()))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _, body) = client.get("/debug/pprof/", Some(profiler.token())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("/debug/pprof/profile"), "{body}");
    let (status, _, body) = client
        .get("/debug/pprof/profile?seconds=1", Some(profiler.token()))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Not plain HTTP.
    assert_eq!(plain_status(addr, "/debug/pprof/").await, None);
    stop.cancel();
    task.await.unwrap().unwrap();
}
