//! `rudder_envtest::setup` against a mirror in the upstream layouts on 127.0.0.1 (an index of
//! envtest archives, Kubernetes' release downloads with their `.sha512`, KWOK's release),
//! made by the test: from this machine's binaries for a good install that a control plane
//! then starts from, found through the install cache alone; from small stand-ins for each
//! failure, which must be a clear error that leaves nothing installed.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use flate2::Compression;
use flate2::write::GzEncoder;
use ring::digest::{Context, SHA512};
use rudder_envtest::TestEnv;
use rudder_envtest::setup::ASSETS_ENV;
use rudder_envtest::setup::Version;
use rudder_envtest::setup::{Component, Error, Installer, KWOK_VERSION, Platform, Selector};

/// Set (to the install's directory) in the child process that starts a control plane from
/// the install cache; this process's own environment stays as it is.
const CHILD: &str = "RUDDER_ENVTEST_SETUP_TEST_CHILD";

/// The release the stand-in mirror serves.
const FAKE: &str = "v1.37.2";

#[test]
fn a_downloaded_release_installs_complete_and_a_control_plane_starts_from_the_cache() {
    if let Some(dir) = std::env::var_os(CHILD) {
        return start_from_the_cache(Path::new(&dir));
    }
    let (source, version) = machine_binaries();
    let tmp = TempDir::new("good");
    let server = Server::start();
    let platform = Platform::current();

    // The archive as controller-tools publishes it, from this machine's etcd and
    // kube-apiserver (stored, not compressed: the test's time goes to verifying, not to
    // deflating 150 MB in a debug build).
    let name = archive_name(&version.text, &platform);
    let archive = tmp.path().join(&name);
    write_archive(
        fs::File::create(&archive).unwrap(),
        &[
            (
                "controller-tools/envtest/etcd",
                Data::File(source.join("etcd")),
            ),
            (
                "controller-tools/envtest/kube-apiserver",
                Data::File(source.join("kube-apiserver")),
            ),
            (
                "controller-tools/envtest/kubectl",
                Data::Bytes(script("kubectl")),
            ),
        ],
        Compression::none(),
    );
    let archive_url = server.put(&format!("/archives/{name}"), Body::File(archive.clone()));
    // A newer patch the index has only for another platform: never chosen here.
    let newer = format!("v{}.{}.{}", version.major, version.minor, version.patch + 1);
    let elsewhere = Platform::new("plan9", "amd64");
    let index = index_yaml(&[
        (
            &version.text,
            &platform,
            &sha512_file(&archive),
            &archive_url,
        ),
        (
            &newer,
            &elsewhere,
            &sha512(b"x"),
            &server.url(&format!("/archives/{}", archive_name(&newer, &elsewhere))),
        ),
    ]);
    server.put("/index.yaml", Body::Bytes(index.into_bytes()));
    for name in ["kube-controller-manager", "kube-scheduler"] {
        let path = release_path(&version.text, &platform, name);
        let file = source.join(name);
        server.put(
            &format!("{path}.sha512"),
            Body::Bytes(sha512_file(&file).into_bytes()),
        );
        server.put(&path, Body::File(file));
    }
    let kwok_url = server.put(&kwok_path(&platform), Body::File(source.join("kwok")));

    // Where rudder-envtest looks when XDG_CACHE_HOME is `xdg`.
    let xdg = tmp.path().join("xdg");
    let root = xdg.join("rudder").join("envtest");
    let said = Arc::new(Mutex::new(Vec::new()));
    let log = said.clone();
    let installer = mirror_installer(&server, &root)
        .on_progress(move |p| log.lock().unwrap().push(p.to_string()));
    let selector = Selector::Minor {
        major: version.major,
        minor: version.minor,
    };
    let installed = installer.ensure(&selector).unwrap();

    assert_eq!(installed.version, version);
    assert_eq!(installed.dir, root.join(&version.text));
    assert_eq!(installed.components, Component::ALL);
    assert_eq!(
        names(&installed.dir),
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubectl",
            "kwok",
            "kwok-stages.yaml"
        ]
    );
    // Nothing beside the release: the scratch directory was renamed into place.
    assert_eq!(names(&root), [version.text.as_str()]);
    for name in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ] {
        assert_eq!(
            sha512_file(&installed.dir.join(name)),
            sha512_file(&source.join(name)),
            "{name}"
        );
    }
    let said = said.lock().unwrap().clone();
    for line in [
        format!("verified {archive_url} (SHA-512)"),
        format!(
            "verified {} (SHA-512)",
            server.url(&release_path(&version.text, &platform, "kube-scheduler"))
        ),
        format!(
            "verified {} (SHA-512)",
            server.url(&release_path(
                &version.text,
                &platform,
                "kube-controller-manager"
            ))
        ),
        format!("downloaded {kwok_url} (its project publishes no checksum)"),
    ] {
        assert!(said.contains(&line), "{line:?} not in {said:#?}");
    }

    // The release named exactly is installed: used without asking the mirror anything.
    let asked = server.requests().len();
    let again = installer.ensure(&Selector::Exact(version)).unwrap();
    assert_eq!(again, installed);
    assert_eq!(server.requests().len(), asked);

    // A control plane with every component starts from the install cache, with no binary
    // directory, no RUDDER_ENVTEST_ASSETS, only XDG_CACHE_HOME (a child process: setting
    // this process's environment would race with the other tests).
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "a_downloaded_release_installs_complete_and_a_control_plane_starts_from_the_cache",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &installed.dir)
        .env("XDG_CACHE_HOME", &xdg)
        .env_remove(ASSETS_ENV)
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

/// The child's half: every process of the control plane runs from `dir`.
fn start_from_the_cache(dir: &Path) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let env = TestEnv::builder()
            .controller_manager(true)
            .nodes(1)
            .start()
            .await
            .unwrap();
        let mut names = Vec::new();
        for (name, pid) in env.pids() {
            // Where each process's binary is, as the kernel says (Linux's /proc).
            if cfg!(target_os = "linux") {
                let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap();
                assert!(
                    exe.starts_with(dir),
                    "{name} runs {}, not from {}",
                    exe.display(),
                    dir.display()
                );
            }
            names.push(name);
        }
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "etcd",
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kwok"
            ]
        );
        env.stop().unwrap();
    });
}

#[test]
fn an_archive_with_a_wrong_hash_is_refused_and_nothing_is_installed() {
    let tmp = TempDir::new("hash");
    let server = Server::start();
    let platform = Platform::current();
    let name = archive_name(FAKE, &platform);
    let url = server.put(&format!("/archives/{name}"), Body::Bytes(fake_archive()));
    let published = sha512(b"what the index promised");
    server.put(
        "/index.yaml",
        Body::Bytes(index_yaml(&[(FAKE, &platform, &published, &url)]).into_bytes()),
    );
    let root = tmp.path().join("cache");

    let err = mirror_installer(&server, &root)
        .ensure(&Selector::Any)
        .unwrap_err();

    match &err {
        Error::HashMismatch {
            url: bad,
            expected,
            actual,
        } => {
            assert_eq!(bad, &url);
            assert_eq!(expected, &published);
            assert_eq!(actual, &sha512(&fake_archive()));
        }
        other => panic!("expected a hash mismatch, got {other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with(&format!("{url} failed verification: its SHA-512 is "))
    );
    assert_eq!(names(&root), Vec::<String>::new());
}

#[test]
fn a_truncated_download_is_refused_and_nothing_is_installed() {
    let tmp = TempDir::new("truncated");
    let server = Server::start();
    let platform = Platform::current();
    let archive = fake_archive();
    let name = archive_name(FAKE, &platform);
    // The whole length announced, half of it sent, then the connection closed.
    let url = server.put(
        &format!("/archives/{name}"),
        Body::Truncated(archive.clone()),
    );
    server.put(
        "/index.yaml",
        Body::Bytes(index_yaml(&[(FAKE, &platform, &sha512(&archive), &url)]).into_bytes()),
    );
    let root = tmp.path().join("cache");

    let err = mirror_installer(&server, &root)
        .ensure(&FAKE.parse().unwrap())
        .unwrap_err();

    let total = archive.len() as u64;
    assert!(
        matches!(
            &err,
            Error::Truncated { url: u, received, expected }
                if u == &url && *expected == total && *received < total
        ),
        "{err:?}"
    );
    assert_eq!(names(&root), Vec::<String>::new());
}

#[test]
fn a_component_failing_verification_leaves_nothing_installed() {
    let tmp = TempDir::new("component");
    let server = fake_mirror();
    let platform = Platform::current();
    let scheduler = release_path(FAKE, &platform, "kube-scheduler");
    server.put(
        &format!("{scheduler}.sha512"),
        Body::Bytes(format!("{}  kube-scheduler\n", sha512(b"another build")).into_bytes()),
    );
    let root = tmp.path().join("cache");

    let err = mirror_installer(&server, &root)
        .ensure(&Selector::Any)
        .unwrap_err();

    assert!(
        matches!(&err, Error::HashMismatch { url, .. } if *url == server.url(&scheduler)),
        "{err:?}"
    );
    // The archive and the controller manager were good, and are gone with the rest.
    assert_eq!(names(&root), Vec::<String>::new());

    // KWOK missing from the mirror: a 404 naming it, and again nothing installed.
    let kwok = server.url(&kwok_path(&platform));
    server.put(&kwok_path(&platform), Body::Missing);
    let err = mirror_installer(&server, &root)
        .components([Component::Kwok])
        .ensure(&Selector::Any)
        .unwrap_err();
    assert!(
        matches!(&err, Error::Status { url, status: 404 } if *url == kwok),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("cannot download {kwok}: the server answered 404")
    );
    assert_eq!(names(&root), Vec::<String>::new());
}

#[test]
fn a_release_directory_without_the_api_server_is_replaced_by_a_whole_install() {
    let tmp = TempDir::new("broken");
    let server = fake_mirror();
    let root = tmp.path().join("cache");
    let broken = root.join(FAKE);
    fs::create_dir_all(&broken).unwrap();
    fs::write(broken.join("etcd"), "left by hand").unwrap();

    let installed = mirror_installer(&server, &root)
        .ensure(&FAKE.parse().unwrap())
        .unwrap();

    assert_eq!(installed.dir, broken);
    assert_eq!(installed.components, Component::ALL);
    assert_eq!(fs::read(broken.join("etcd")).unwrap(), script("etcd"));
    assert_eq!(names(&root), [FAKE]);
}

#[test]
fn an_unknown_version_is_refused_before_any_download() {
    let tmp = TempDir::new("unknown");
    let server = fake_mirror();
    let root = tmp.path().join("cache");

    let err = mirror_installer(&server, &root)
        .ensure(&"1.99".parse().unwrap())
        .unwrap_err();

    assert!(matches!(err, Error::UnknownVersion { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "no release matches 1.99.x in {} (there: {FAKE})",
            server.url("/index.yaml")
        )
    );
    assert_eq!(server.requests(), ["/index.yaml"]);
    assert!(!root.exists());
}

#[test]
fn a_release_without_this_platform_is_refused_before_any_download() {
    let tmp = TempDir::new("platform");
    let server = fake_mirror();
    let root = tmp.path().join("cache");
    let ours = Platform::current();

    let err = mirror_installer(&server, &root)
        .platform(Platform::new("linux", "riscv64"))
        .ensure(&FAKE.parse().unwrap())
        .unwrap_err();

    assert_eq!(
        err.to_string(),
        format!("{FAKE} has no archive for linux/riscv64 (there: {ours})")
    );
    assert!(matches!(err, Error::MissingPlatform { .. }));
    assert_eq!(server.requests(), ["/index.yaml"]);
    assert!(!root.exists());
}

#[test]
fn missing_components_are_added_to_an_install_and_offline_finds_only_what_is_there() {
    let tmp = TempDir::new("complete");
    let server = fake_mirror();
    let root = tmp.path().join("cache");
    let platform = Platform::current();

    let bare = mirror_installer(&server, &root)
        .components([])
        .ensure(&Selector::Any)
        .unwrap();
    assert_eq!(bare.components, []);
    assert_eq!(names(&bare.dir), ["etcd", "kube-apiserver", "kubectl"]);

    // Offline, the bare install does not have what is asked for, and nothing is fetched.
    let asked = server.requests().len();
    let err = mirror_installer(&server, &root)
        .offline(true)
        .ensure(&Selector::Any)
        .unwrap_err();
    assert!(
        matches!(&err, Error::NotInstalled { missing, .. } if missing.len() == 4),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), asked);

    // Online, the components are added; the archive is not downloaded again.
    let full = mirror_installer(&server, &root)
        .ensure(&Selector::Any)
        .unwrap();
    assert_eq!(full.dir, bare.dir);
    assert_eq!(full.components, Component::ALL);
    let archive = format!("/archives/{}", archive_name(FAKE, &platform));
    assert_eq!(
        server.requests().iter().filter(|p| **p == archive).count(),
        1
    );
    assert_eq!(names(&root), [FAKE]);
    let offline = mirror_installer(&server, &root).offline(true);
    assert_eq!(offline.ensure(&Selector::Any).unwrap(), full);

    // Listed beside the index's releases, then removed.
    let listed = mirror_installer(&server, &root).list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].version.text, FAKE);
    assert_eq!(listed[0].installed.as_deref(), Some(full.dir.as_path()));
    assert!(listed[0].available);
    assert_eq!(
        offline.cleanup(&"1.36".parse().unwrap()).unwrap(),
        Vec::<PathBuf>::new()
    );
    assert_eq!(offline.cleanup(&Selector::Any).unwrap(), [full.dir]);
    assert_eq!(names(&root), Vec::<String>::new());
    assert!(matches!(
        offline.ensure(&Selector::Any),
        Err(Error::NotInstalled { .. })
    ));
}

// ---- the mirror -------------------------------------------------------------------------

/// An installer reading everything from `server`, installing under `root`.
fn mirror_installer(server: &Server, root: &Path) -> Installer {
    Installer::with_dir(root)
        .index_url(server.url("/index.yaml"))
        .release_url(server.url("/release"))
        .kwok_url(server.url("/kwok"))
}

/// A mirror of [`FAKE`] for this platform with stand-ins for every binary, all published
/// with the right checksums.
fn fake_mirror() -> Server {
    let server = Server::start();
    let platform = Platform::current();
    let archive = fake_archive();
    let name = archive_name(FAKE, &platform);
    let url = server.put(&format!("/archives/{name}"), Body::Bytes(archive.clone()));
    server.put(
        "/index.yaml",
        Body::Bytes(index_yaml(&[(FAKE, &platform, &sha512(&archive), &url)]).into_bytes()),
    );
    for name in ["kube-controller-manager", "kube-scheduler"] {
        let path = release_path(FAKE, &platform, name);
        let data = script(name);
        server.put(
            &format!("{path}.sha512"),
            Body::Bytes(format!("{}  {name}\n", sha512(&data)).into_bytes()),
        );
        server.put(&path, Body::Bytes(data));
    }
    server.put(&kwok_path(&platform), Body::Bytes(script("kwok")));
    server
}

/// An archive of stand-in binaries in the envtest layout, the same bytes each time.
fn fake_archive() -> Vec<u8> {
    write_archive(
        Vec::new(),
        &[
            ("controller-tools/envtest/etcd", Data::Bytes(script("etcd"))),
            (
                "controller-tools/envtest/kube-apiserver",
                Data::Bytes(script("kube-apiserver")),
            ),
            (
                "controller-tools/envtest/kubectl",
                Data::Bytes(script("kubectl")),
            ),
        ],
        Compression::fast(),
    )
}

fn script(name: &str) -> Vec<u8> {
    format!("#!/bin/sh\necho {name} stand-in\n").into_bytes()
}

enum Data {
    Bytes(Vec<u8>),
    File(PathBuf),
}

/// A gzipped tar of `entries` written to `out`, which is returned.
fn write_archive<W: Write>(out: W, entries: &[(&str, Data)], level: Compression) -> W {
    let mut tar = tar::Builder::new(GzEncoder::new(out, level));
    for (name, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o755);
        match data {
            Data::Bytes(bytes) => {
                header.set_size(bytes.len() as u64);
                tar.append_data(&mut header, name, bytes.as_slice())
                    .unwrap();
            }
            Data::File(file) => {
                header.set_size(fs::metadata(file).unwrap().len());
                tar.append_data(&mut header, name, fs::File::open(file).unwrap())
                    .unwrap();
            }
        }
    }
    tar.into_inner().unwrap().finish().unwrap()
}

fn archive_name(version: &str, platform: &Platform) -> String {
    format!("envtest-{version}-{}-{}.tar.gz", platform.os, platform.arch)
}

fn release_path(version: &str, platform: &Platform, name: &str) -> String {
    format!(
        "/release/{version}/bin/{}/{}/{name}",
        platform.os, platform.arch
    )
}

fn kwok_path(platform: &Platform) -> String {
    format!(
        "/kwok/v{KWOK_VERSION}/kwok-{}-{}",
        platform.os, platform.arch
    )
}

/// controller-tools' `envtest-releases.yaml` for `(version, platform, sha512, url)` entries.
fn index_yaml(entries: &[(&str, &Platform, &str, &str)]) -> String {
    let mut yaml = String::from("releases:\n");
    for (version, platform, hash, url) in entries {
        yaml.push_str(&format!(
            "  {version}:\n    {}:\n      hash: {hash}\n      selfLink: {url}\n",
            archive_name(version, platform)
        ));
    }
    yaml
}

fn sha512(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&SHA512, bytes).as_ref())
}

fn sha512_file(path: &Path) -> String {
    let mut file = fs::File::open(path).unwrap();
    let mut context = Context::new(&SHA512);
    let mut buf = vec![0; 1 << 20];
    loop {
        let n = file.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        context.update(&buf[..n]);
    }
    hex(context.finish().as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// This machine's control plane (what the other tests run): `RUDDER_ENVTEST_ASSETS` if set,
/// else the newest complete install in the cache; and its release, as its API server says.
fn machine_binaries() -> (PathBuf, Version) {
    let dir = match std::env::var_os(ASSETS_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            Installer::new()
                .unwrap()
                .offline(true)
                .ensure(&Selector::Any)
                .expect("no complete control plane installed: run `cargo xtask envtest install`")
                .dir
        }
    };
    let out = Command::new(dir.join("kube-apiserver"))
        .arg("--version")
        .output()
        .unwrap();
    let version = Version::parse(&String::from_utf8_lossy(&out.stdout)).unwrap();
    (dir, version)
}

/// The sorted names in `dir`; none when it is absent.
fn names(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("envtest-setup-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What the server answers for a path.
#[derive(Clone)]
enum Body {
    Bytes(Vec<u8>),
    File(PathBuf),
    /// The whole length announced, only the first half sent, then the connection closed.
    Truncated(Vec<u8>),
    /// 404, as for a path never put.
    Missing,
}

type Routes = Arc<Mutex<HashMap<String, Body>>>;

/// A static HTTP/1.1 server on 127.0.0.1: one thread per connection, each answered and
/// closed; every request's path is recorded. Dropping it stops it and joins its threads.
struct Server {
    addr: SocketAddr,
    routes: Routes,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let routes = Routes::default();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (routes, requests, stop) = (routes.clone(), requests.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut handlers = Vec::new();
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let (routes, requests) = (routes.clone(), requests.clone());
                    handlers.push(std::thread::spawn(move || {
                        answer(stream, &routes, &requests);
                    }));
                }
                for handler in handlers {
                    let _ = handler.join();
                }
            })
        };
        Self {
            addr,
            routes,
            requests,
            stop,
            accept: Some(accept),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Serves `body` at `path`; returns its URL.
    fn put(&self, path: &str, body: Body) -> String {
        self.routes.lock().unwrap().insert(path.to_owned(), body);
        self.url(path)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the stop.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn answer(stream: TcpStream, routes: &Routes, requests: &Mutex<Vec<String>>) {
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
    requests.lock().unwrap().push(path.clone());
    let body = routes.lock().unwrap().get(&path).cloned();
    let mut out = stream;
    let head =
        |len: u64| format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n");
    // A client that went away is not the server's failure: the test sees the client's side.
    let _ = match body {
        None | Some(Body::Missing) => out
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        Some(Body::Bytes(bytes)) => out
            .write_all(head(bytes.len() as u64).as_bytes())
            .and_then(|()| out.write_all(&bytes)),
        Some(Body::Truncated(bytes)) => out
            .write_all(head(bytes.len() as u64).as_bytes())
            .and_then(|()| out.write_all(&bytes[..bytes.len() / 2])),
        Some(Body::File(path)) => fs::File::open(&path).and_then(|mut file| {
            out.write_all(head(file.metadata()?.len()).as_bytes())?;
            std::io::copy(&mut file, &mut out).map(|_| ())
        }),
    };
    let _ = out.flush();
}
