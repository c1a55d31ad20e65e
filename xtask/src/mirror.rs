//! A local mirror of the upstream control-plane downloads, made from binaries this machine
//! built: controller-tools' envtest index and archive, Kubernetes' release binaries with
//! their `.sha512`, and KWOK's release binary, in the layouts the real hosts use, served over
//! HTTP on 127.0.0.1. CI points a scaffolded operator's `cargo xtask test` at it, so the
//! download path a user outside this repository takes is the one tested (the real hosts are
//! not reachable from CI machines).

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use flate2::Compression;
use flate2::write::GzEncoder;
use rudder_envtest_setup::Platform;

/// The KWOK release rudder-envtest-setup downloads.
const KWOK_VERSION: &str = "v0.8.0";

/// A static file server on 127.0.0.1 over a mirror directory; stopped and joined on drop.
pub(crate) struct Mirror {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Mirror {
    /// Writes a mirror of release `version` (`v1.37.2`) of the binaries in `assets` into
    /// `dir`, for this machine's platform, and serves it.
    pub(crate) fn start(assets: &Path, version: &str, dir: &Path) -> Result<Self, String> {
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot bind a mirror: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("the mirror's address: {e}"))?;
        write(assets, version, dir, &format!("http://{addr}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: the mirror joins the accepting thread on drop, which joins the threads answering"
        )]
        let accept = {
            let (stop, root) = (Arc::clone(&stop), dir.to_path_buf());
            std::thread::spawn(move || {
                let mut answering = Vec::new();
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let root = root.clone();
                    answering.push(std::thread::spawn(move || answer(stream, &root)));
                }
                for thread in answering {
                    let _ = thread.join();
                }
            })
        };
        Ok(Self {
            addr,
            stop,
            accept: Some(accept),
        })
    }

    /// The index's URL (`RUDDER_ENVTEST_INDEX_URL`).
    pub(crate) fn index_url(&self) -> String {
        format!("http://{}/envtest-releases.yaml", self.addr)
    }

    /// The base of the Kubernetes release downloads (`RUDDER_ENVTEST_RELEASE_URL`).
    pub(crate) fn release_url(&self) -> String {
        format!("http://{}/release", self.addr)
    }

    /// The base of KWOK's release downloads (`RUDDER_ENVTEST_KWOK_URL`).
    pub(crate) fn kwok_url(&self) -> String {
        format!("http://{}/kwok", self.addr)
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the stop.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// Writes the mirror's files: the index (its `selfLink`s under `base`), the archive, the
/// release binaries with their `.sha512`, KWOK's binary.
fn write(assets: &Path, version: &str, dir: &Path, base: &str) -> Result<(), String> {
    let platform = Platform::current();
    let (os, arch) = (platform.os.as_str(), platform.arch.as_str());
    let archive = format!("envtest-{version}-{os}-{arch}.tar.gz");
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let archive_path = dir.join(&archive);
    let file =
        fs::File::create(&archive_path).map_err(|e| format!("{}: {e}", archive_path.display()))?;
    let mut tar = tar::Builder::new(GzEncoder::new(file, Compression::fast()));
    for name in ["etcd", "kube-apiserver", "kubectl"] {
        let source = assets.join(name);
        // kubectl is in the upstream archive; this machine's build has none, and tests do
        // not need it.
        if name == "kubectl" && !source.exists() {
            continue;
        }
        tar.append_path_with_name(&source, format!("controller-tools/envtest/{name}"))
            .map_err(|e| format!("archiving {}: {e}", source.display()))?;
    }
    tar.into_inner()
        .and_then(GzEncoder::finish)
        .map_err(|e| format!("{}: {e}", archive_path.display()))?;
    let index = format!(
        "releases:\n  {version}:\n    {archive}:\n      hash: {hash}\n      selfLink: {base}/{archive}\n",
        hash = sha512(&archive_path)?,
    );
    let index_path = dir.join("envtest-releases.yaml");
    fs::write(&index_path, index).map_err(|e| format!("{}: {e}", index_path.display()))?;
    let release = dir
        .join("release")
        .join(version)
        .join("bin")
        .join(os)
        .join(arch);
    fs::create_dir_all(&release).map_err(|e| format!("{}: {e}", release.display()))?;
    for name in ["kube-controller-manager", "kube-scheduler"] {
        let target = release.join(name);
        fs::copy(assets.join(name), &target).map_err(|e| format!("{}: {e}", target.display()))?;
        let digest = release.join(format!("{name}.sha512"));
        fs::write(&digest, sha512(&target)?).map_err(|e| format!("{}: {e}", digest.display()))?;
    }
    let kwok = dir.join("kwok").join(KWOK_VERSION);
    fs::create_dir_all(&kwok).map_err(|e| format!("{}: {e}", kwok.display()))?;
    let target = kwok.join(format!("kwok-{os}-{arch}"));
    fs::copy(assets.join("kwok"), &target).map_err(|e| format!("{}: {e}", target.display()))?;
    Ok(())
}

/// The SHA-512 of the file at `path`, in hex.
fn sha512(path: &Path) -> Result<String, String> {
    let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let digest = ring::digest::digest(&ring::digest::SHA512, &bytes);
    Ok(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// Answers one request: the file under `root` its path names (no `..`), or 404.
fn answer(stream: TcpStream, root: &Path) {
    let Ok(read) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            break;
        }
    }
    let relative = PathBuf::from(path.trim_start_matches('/'));
    let safe = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    let mut out = stream;
    let file = safe
        .then(|| fs::File::open(root.join(&relative)).ok())
        .flatten();
    // A client that went away is the client's failure, seen on its side.
    let _ = match file {
        Some(mut file) => file.metadata().and_then(|meta| {
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                meta.len()
            )?;
            std::io::copy(&mut file, &mut out).map(|_| ())
        }),
        None => out
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    };
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use rudder_envtest_setup::{Component, Installer, Selector};

    use super::*;

    /// The mirror's layout is the one rudder-envtest-setup downloads from: an install from it
    /// verifies and holds every file.
    #[test]
    fn an_install_from_the_mirror_is_complete() {
        let root = std::env::temp_dir().join(format!("xtask-mirror-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let assets = root.join("assets");
        fs::create_dir_all(&assets).unwrap();
        for name in [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        ] {
            fs::write(assets.join(name), format!("#!/bin/sh\necho {name}\n")).unwrap();
        }
        let mirror = Mirror::start(&assets, "v1.37.2", &root.join("mirror")).unwrap();
        let installed = Installer::with_dir(root.join("cache"))
            .index_url(mirror.index_url())
            .release_url(mirror.release_url())
            .kwok_url(mirror.kwok_url())
            .components(Component::ALL)
            .ensure(&"1.37.x".parse::<Selector>().unwrap())
            .unwrap();
        assert_eq!(installed.version.to_string(), "v1.37.2");
        for name in ["etcd", "kube-apiserver", "kube-controller-manager", "kwok"] {
            let installed = fs::read_to_string(installed.dir.join(name)).unwrap();
            assert!(installed.contains(name), "{name}: {installed}");
        }
        drop(mirror);
        fs::remove_dir_all(&root).unwrap();
    }
}
