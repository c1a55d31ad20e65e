//! Certificates: hot reload by a Secret-volume symlink swap under load, a bad new pair kept
//! out and counted, start errors naming the files, and the readiness check.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{
    Ca, Client, SecretDir, counter, eventually, register_allow as register, review, serve,
};
use rudder_webhook::{CertificateStore, LoadError, Options, StartError, WebhookServer};
use serde_json::json;

fn a_review() -> serde_json::Value {
    review(
        "u",
        "CREATE",
        ("", "v1", "ConfigMap"),
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})),
        None,
    )
}

const POLL: Duration = Duration::from_millis(100);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_pair_is_served_within_the_poll_period_and_no_call_fails() {
    let mut served = serve(|options| options.cert_poll_period(POLL), register).await;
    let addr = served.running.local_addr();
    let ca_der = served.ca.der.clone();

    // A client keeps calling, each call on a new connection (a new handshake), until told
    // to stop; every failure is counted.
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let caller = {
        let (stop, calls, failures, ca_der) = (
            stop.clone(),
            calls.clone(),
            failures.clone(),
            ca_der.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let outcome = async {
                    let mut client = Client::connect(addr, &ca_der).await?;
                    let body = serde_json::to_vec(&a_review()).unwrap();
                    let (status, _) = client.post("/allow", "application/json", body).await?;
                    if status.is_success() {
                        Ok(())
                    } else {
                        Err(format!("status {status}"))
                    }
                }
                .await;
                calls.fetch_add(1, Ordering::SeqCst);
                if let Err(error) = outcome {
                    failures.lock().unwrap().push(error);
                }
            }
        })
    };
    eventually("calls before the swap", async || {
        calls.load(Ordering::SeqCst) >= 5
    })
    .await;

    let new_pair = served.ca.serving_pair();
    let reads_before = counter("certwatcher_read_certificate_total", "");
    let swapped_at = tokio::time::Instant::now();
    served
        .secret
        .write(new_pair.cert_pem.as_bytes(), new_pair.key_pem.as_bytes());
    eventually("the new certificate served", async || {
        let client = Client::connect(addr, &ca_der).await.unwrap();
        client.peer_certificate.as_ref() == Some(&new_pair.der)
    })
    .await;
    let took = swapped_at.elapsed();
    // One poll period, plus scheduling slack on a shared machine.
    assert!(took < POLL * 10, "new certificate served after {took:?}");
    assert!(counter("certwatcher_read_certificate_total", "") > reads_before);

    let calls_at_swap = calls.load(Ordering::SeqCst);
    eventually("calls after the swap", async || {
        calls.load(Ordering::SeqCst) >= calls_at_swap + 5
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    caller.await.unwrap();
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} of {} calls failed: {:?}",
        failures.len(),
        calls.load(Ordering::SeqCst),
        failures
    );
    served.running.check_ready().await.unwrap();
}

#[tokio::test]
async fn a_bad_new_pair_keeps_the_old_one_and_is_counted() {
    let mut served = serve(|options| options.cert_poll_period(POLL), register).await;
    let addr = served.running.local_addr();
    let errors_before = counter("certwatcher_read_certificate_errors_total", "");

    // A certificate with another pair's key: both parse, they do not match.
    let other = served.ca.serving_pair();
    served
        .secret
        .write(served.pair.cert_pem.as_bytes(), other.key_pem.as_bytes());
    eventually("the mismatch counted", async || {
        counter("certwatcher_read_certificate_errors_total", "") > errors_before
    })
    .await;
    let client = Client::connect(addr, &served.ca.der).await.unwrap();
    assert_eq!(client.peer_certificate.as_ref(), Some(&served.pair.der));

    // Garbage: counted again, old one still served, still ready.
    let errors_mid = counter("certwatcher_read_certificate_errors_total", "");
    served.secret.write(b"not a certificate", b"not a key");
    eventually("the garbage counted", async || {
        counter("certwatcher_read_certificate_errors_total", "") > errors_mid
    })
    .await;
    let mut client = Client::connect(addr, &served.ca.der).await.unwrap();
    assert_eq!(client.peer_certificate.as_ref(), Some(&served.pair.der));
    assert_eq!(
        client.review("/allow", &a_review()).await["response"]["allowed"],
        true
    );
    served.running.check_ready().await.unwrap();
}

#[tokio::test]
async fn start_fails_naming_the_files_when_the_pair_is_missing_or_bad() {
    let dir = std::env::temp_dir().join(format!("rudder-webhook-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = WebhookServer::new(common::options(&dir));
    let error = server.start().await.unwrap_err();
    match &error {
        StartError::Certificate(LoadError::Read { path, .. }) => {
            assert_eq!(path, &dir.join("tls.crt"));
        }
        other => panic!("unexpected {other:?}"),
    }
    // Started once is started: a second call is refused.
    assert!(matches!(
        server.start().await.unwrap_err(),
        StartError::AlreadyStarted
    ));

    let ca = Ca::new("ca");
    let (a, b) = (ca.serving_pair(), ca.serving_pair());
    let mut secret = SecretDir::new(&a);
    secret.write(a.cert_pem.as_bytes(), b.key_pem.as_bytes());
    let server = WebhookServer::new(common::options(secret.path()));
    let error = server.start().await.unwrap_err();
    let text = format!("{}", std::error::Error::source(&error).unwrap());
    assert!(
        text.contains("tls.crt") && text.contains("tls.key"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn check_ready_passes_when_serving_and_fails_without_a_certificate() {
    let ca = Ca::new("ca");
    let pair = ca.serving_pair();
    let empty = CertificateStore::new();
    let server = WebhookServer::new(
        Options::new()
            .bind_address("127.0.0.1:0".parse().unwrap())
            .certificate_store(empty),
    );
    assert!(matches!(
        server.start().await.unwrap_err(),
        StartError::NoCertificate
    ));

    let store = CertificateStore::new();
    store
        .set_pem(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes())
        .unwrap();
    let server = WebhookServer::new(
        Options::new()
            .bind_address("127.0.0.1:0".parse().unwrap())
            .certificate_store(store.clone()),
    );
    register(&server);
    let running = server.start().await.unwrap();
    running.check_ready().await.unwrap();

    store.clear();
    let error = running.check_ready().await.unwrap_err();
    assert!(error.contains("no serving certificate"), "{error}");

    // A certificate from a CA the probe has never seen is still the server's own.
    let other_ca = Ca::new("another ca");
    let other = other_ca.serving_pair();
    store
        .set_pem(other.cert_pem.as_bytes(), other.key_pem.as_bytes())
        .unwrap();
    running.check_ready().await.unwrap();
    let mut client = Client::connect(running.local_addr(), &other_ca.der)
        .await
        .unwrap();
    assert_eq!(
        client.review("/allow", &a_review()).await["response"]["allowed"],
        true
    );

    let addr = running.local_addr();
    running
        .stop(Some(tokio::time::Instant::now() + Duration::from_secs(5)))
        .await;
    assert!(Client::connect(addr, &other_ca.der).await.is_err());
}

#[test]
fn a_store_refuses_a_key_that_is_not_the_certificates() {
    let ca = Ca::new("ca");
    let (a, b) = (ca.serving_pair(), ca.serving_pair());
    let store = CertificateStore::new();
    store
        .set_pem(a.cert_pem.as_bytes(), a.key_pem.as_bytes())
        .unwrap();
    let error = store
        .set_pem(a.cert_pem.as_bytes(), b.key_pem.as_bytes())
        .unwrap_err();
    assert!(
        matches!(error, rudder_webhook::CertificateError::Mismatch(_)),
        "{error}"
    );
    assert_eq!(store.end_entity().as_ref(), Some(&a.der));
}
