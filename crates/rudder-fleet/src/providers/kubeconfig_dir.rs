//! [`KubeconfigDir`]: one member cluster per kubeconfig file in a directory, watched.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::BoxFuture;
use rudder_core::{BoxError, Shutdown};

use super::{config_from_bytes, fingerprint};
use crate::provider::{Announcer, Provider};

/// One member cluster per kubeconfig file in a directory, named by the file's name without
/// its extension (`east.yaml` is `east`), with the file's current context.
///
/// The directory is read when the fleet starts and then every
/// [`poll_every`](Self::poll_every) (2 s by default): a new file engages its cluster, a
/// changed one replaces it, a removed one disengages it. Names starting with `.` are
/// skipped, so a Secret or ConfigMap mounted as a volume works (its files are symbolic
/// links into a hidden, atomically swapped directory). A file that does not parse as a
/// kubeconfig is logged at warn and counted (`rudder_fleet_provider_errors_total`) once per
/// content, and changes nothing: a cluster engaged from an earlier, valid version of the file
/// stays. A directory that cannot be read is logged the same way and read again at the next
/// poll.
#[derive(Clone, Debug)]
pub struct KubeconfigDir {
    dir: PathBuf,
    period: Duration,
}

impl KubeconfigDir {
    /// The kubeconfig files in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            period: Duration::from_secs(2),
        }
    }

    /// How often the directory is read again (default 2 s; at least 10 ms).
    #[must_use]
    pub fn poll_every(mut self, period: Duration) -> Self {
        self.period = period.max(Duration::from_millis(10));
        self
    }
}

impl Provider for KubeconfigDir {
    fn name(&self) -> String {
        format!("kubeconfig-dir {}", self.dir.display())
    }

    fn run(
        &self,
        clusters: Announcer,
        shutdown: Shutdown,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        let dir = self.dir.clone();
        let period = self.period;
        let provider = self.name();
        Box::pin(async move {
            // Per file name: the fingerprint of the content last seen, and whether it was
            // announced (an unparsable one is not).
            let mut seen: HashMap<String, (u64, bool)> = HashMap::new();
            let mut dir_error: Option<String> = None;
            loop {
                match read_dir(&dir).await {
                    Ok(files) => {
                        dir_error = None;
                        scan(&files, &mut seen, &clusters, &provider).await;
                    }
                    Err(error) => {
                        let text = error.to_string();
                        if dir_error.as_deref() != Some(&text) {
                            tracing::warn!(dir = %dir.display(), %error, "cannot read the kubeconfig directory");
                            crate::metrics::provider_error(&provider);
                            dir_error = Some(text);
                        }
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(period) => {}
                    _ = shutdown.stopped() => return Ok(()),
                }
            }
        })
    }
}

/// Announces what changed between `seen` and `files` (name, content).
async fn scan(
    files: &[(String, Vec<u8>)],
    seen: &mut HashMap<String, (u64, bool)>,
    clusters: &Announcer,
    provider: &str,
) {
    for (name, bytes) in files {
        let print = fingerprint(bytes);
        if seen.get(name).is_some_and(|(p, _)| *p == print) {
            continue;
        }
        let was_announced = seen.get(name).is_some_and(|(_, a)| *a);
        match config_from_bytes(bytes).await {
            Ok(config) => {
                clusters.engage(name.clone(), config);
                seen.insert(name.clone(), (print, true));
            }
            Err(error) => {
                tracing::warn!(cluster = %name, %error, "a kubeconfig file does not parse; the cluster is left as it was");
                crate::metrics::provider_error(provider);
                seen.insert(name.clone(), (print, was_announced));
            }
        }
    }
    let gone: Vec<String> = seen
        .keys()
        .filter(|name| !files.iter().any(|(n, _)| n == *name))
        .cloned()
        .collect();
    for name in gone {
        if let Some((_, true)) = seen.remove(&name) {
            clusters.disengage(name);
        }
    }
}

/// The regular files of `dir` (following links) whose names do not start with `.`, by
/// cluster name (the name without its extension), with their contents.
async fn read_dir(dir: &Path) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut entries = tokio::fs::read_dir(dir).await?;
    let mut files = Vec::new();
    while let Some(entry) = entries.next_entry().await? {
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        if file_name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        // A file removed between the listing and this read is simply not there.
        let Ok(meta) = tokio::fs::metadata(&path).await else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let Ok(bytes) = tokio::fs::read(&path).await else {
            continue;
        };
        let name = Path::new(file_name)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(file_name)
            .to_owned();
        files.push((name, bytes));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use rudder_core::Shutdown;
    use tokio::sync::mpsc;

    use super::*;
    use crate::provider::Announcement;

    fn kubeconfig(server: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
             users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
             current-context: x\n"
        )
    }

    /// The next announcement, as (engage?, name, server).
    async fn next(rx: &mut mpsc::UnboundedReceiver<Announcement>) -> (bool, String, String) {
        let announcement = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        match announcement {
            Announcement::Engage { name, config, .. } => {
                (true, name, config.cluster_url.to_string())
            }
            Announcement::Disengage { name, .. } => (false, name, String::new()),
        }
    }

    #[tokio::test]
    async fn files_engage_change_and_disengage_and_garbage_changes_nothing() {
        let dir = std::env::temp_dir().join(format!("rudder-kubeconfigs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("east.yaml"), kubeconfig("https://127.0.0.1:1")).unwrap();
        std::fs::write(dir.join(".hidden"), kubeconfig("https://127.0.0.1:2")).unwrap();
        std::fs::write(dir.join("broken.yaml"), "clusters: [[[").unwrap();
        std::fs::write(dir.join("binary"), [0xff_u8, 0xfe, 0x00]).unwrap();

        let (tx, mut rx) = mpsc::unbounded_channel();
        let shutdown = Shutdown::new();
        let provider = KubeconfigDir::new(&dir).poll_every(Duration::from_millis(20));
        let task = tokio::spawn(provider.run(Announcer::new(tx, "test"), shutdown.clone()));

        // The valid file, only: hidden and unparsable files announce nothing.
        assert_eq!(
            next(&mut rx).await,
            (true, "east".into(), "https://127.0.0.1:1/".into())
        );
        // A changed file replaces its cluster; an unchanged one is not announced again.
        std::fs::write(dir.join("east.yaml"), kubeconfig("https://127.0.0.1:3")).unwrap();
        assert_eq!(
            next(&mut rx).await,
            (true, "east".into(), "https://127.0.0.1:3/".into())
        );
        // A broken version leaves the cluster as it was; a fixed one replaces it.
        std::fs::write(dir.join("east.yaml"), "not: [a kubeconfig").unwrap();
        std::fs::write(dir.join("west.yml"), kubeconfig("https://127.0.0.1:4")).unwrap();
        assert_eq!(
            next(&mut rx).await,
            (true, "west".into(), "https://127.0.0.1:4/".into())
        );
        // A removed file disengages its cluster, even one whose last version was broken.
        std::fs::remove_file(dir.join("east.yaml")).unwrap();
        assert_eq!(next(&mut rx).await, (false, "east".into(), String::new()));
        // The broken files never were clusters: their removal announces nothing.
        std::fs::remove_file(dir.join("broken.yaml")).unwrap();
        std::fs::remove_file(dir.join("west.yml")).unwrap();
        assert_eq!(next(&mut rx).await, (false, "west".into(), String::new()));

        shutdown.stop(None);
        task.await.unwrap().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
