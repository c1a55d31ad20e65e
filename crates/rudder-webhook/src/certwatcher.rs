//! The file certificate source: `tls.crt`/`tls.key` read at start and polled, each valid
//! new pair swapped into the [`CertificateStore`], a bad one logged, counted and ignored.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::certificate::{CertificateError, CertificateStore, parse_pem_pair};
use crate::metrics;

/// Why the certificate files could not be loaded at start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A file could not be read (missing, unreadable). Retrying helps once it is there.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's answer.
        #[source]
        source: std::io::Error,
    },
    /// The files were read but do not make a serving certificate.
    #[error("{cert} and {key} do not make a serving certificate")]
    Invalid {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What is wrong with them.
        #[source]
        source: CertificateError,
    },
}

/// Watches one certificate/key pair of files and keeps a [`CertificateStore`] filled with
/// the newest valid pair: [`load`](Self::load) once, then [`run`](Self::run) until stopped.
///
/// The webhook server's file source; the manager's secure metrics server reads its files
/// with it too. Reads and failures are counted in the `certwatcher_*` metrics.
#[derive(Debug)]
pub struct FileWatcher {
    cert: PathBuf,
    key: PathBuf,
    store: CertificateStore,
    /// The bytes last read (valid or not), so an unchanged pair is not parsed again and a
    /// bad pair is reported once.
    last: Option<(Vec<u8>, Vec<u8>)>,
    /// The last read failure's message, so a persisting failure is logged once.
    last_failure: Option<String>,
}

impl FileWatcher {
    /// Reads the pair and sets it in `store`; the error names the files.
    pub async fn load(
        cert: PathBuf,
        key: PathBuf,
        store: CertificateStore,
    ) -> Result<Self, LoadError> {
        let mut watcher = Self {
            cert,
            key,
            store,
            last: None,
            last_failure: None,
        };
        metrics::certificate_read();
        let result = async {
            let (cert_pem, key_pem) = watcher.read().await?;
            let loaded =
                parse_pem_pair(&cert_pem, &key_pem).map_err(|source| LoadError::Invalid {
                    cert: watcher.cert.clone(),
                    key: watcher.key.clone(),
                    source,
                })?;
            watcher.store.set(std::sync::Arc::new(loaded));
            watcher.last = Some((cert_pem, key_pem));
            Ok(())
        }
        .await;
        if result.is_err() {
            metrics::certificate_read_error();
        }
        result.map(|()| watcher)
    }

    /// Reads the pair again every `period` until `stop`, swapping each valid new pair into
    /// the store; a pair that is missing or invalid is logged and counted, and the one
    /// loaded is kept.
    pub async fn run(mut self, period: Duration, stop: CancellationToken) {
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate; the pair was just loaded.
        ticker.tick().await;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticker.tick() => self.poll().await,
            }
        }
    }

    /// Reads the pair again and swaps it in if it changed and is valid.
    pub(crate) async fn poll(&mut self) {
        let (cert_pem, key_pem) = match self.read().await {
            Ok(pair) => pair,
            Err(error) => {
                // Mid-swap, a Secret volume is never missing a file (the swap is one rename),
                // so a failed read is worth an error; it is logged once while it lasts.
                metrics::certificate_read();
                metrics::certificate_read_error();
                let message = error.to_string();
                if self.last_failure.as_deref() != Some(&message) {
                    tracing::error!(error = %message, "cannot read the webhook certificate; keeping the one loaded");
                    self.last_failure = Some(message);
                }
                return;
            }
        };
        self.last_failure = None;
        if self
            .last
            .as_ref()
            .is_some_and(|(cert, key)| *cert == cert_pem && *key == key_pem)
        {
            return;
        }
        let (cert_pem, key_pem, parsed) = self.parse_settled(cert_pem, key_pem).await;
        metrics::certificate_read();
        match parsed {
            Ok(loaded) => {
                self.store.set(std::sync::Arc::new(loaded));
                tracing::info!(cert = %self.cert.display(), "webhook certificate reloaded");
            }
            Err(error) => {
                metrics::certificate_read_error();
                tracing::error!(
                    cert = %self.cert.display(),
                    key = %self.key.display(),
                    error = &error as &dyn std::error::Error,
                    "new webhook certificate is not valid; keeping the one loaded"
                );
            }
        }
        self.last = Some((cert_pem, key_pem));
    }

    /// Parses a pair; when it does not parse, reads it again in case a swap happened
    /// between reading the two files (each resolves the volume's `..data` link on its own),
    /// and parses the newer pair instead, a few times at most.
    async fn parse_settled(
        &self,
        mut cert_pem: Vec<u8>,
        mut key_pem: Vec<u8>,
    ) -> (
        Vec<u8>,
        Vec<u8>,
        Result<rustls::sign::CertifiedKey, CertificateError>,
    ) {
        let mut attempts = 0;
        loop {
            let parsed = parse_pem_pair(&cert_pem, &key_pem);
            attempts += 1;
            if parsed.is_ok() || attempts == 3 {
                return (cert_pem, key_pem, parsed);
            }
            match self.read().await {
                Ok((cert, key)) if cert != cert_pem || key != key_pem => {
                    cert_pem = cert;
                    key_pem = key;
                }
                _ => return (cert_pem, key_pem, parsed),
            }
        }
    }

    async fn read(&self) -> Result<(Vec<u8>, Vec<u8>), LoadError> {
        let cert = read_file(&self.cert).await?;
        let key = read_file(&self.key).await?;
        Ok((cert, key))
    }
}

async fn read_file(path: &Path) -> Result<Vec<u8>, LoadError> {
    // Reading by path follows the symlinks a Secret volume swaps, so the content read is
    // always the current one, whatever the link's own mtime says.
    tokio::fs::read(path)
        .await
        .map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })
}
