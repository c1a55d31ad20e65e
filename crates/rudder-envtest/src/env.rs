//! [`TestEnv`] and its builder: starting etcd, kube-apiserver and optionally
//! kube-controller-manager, kube-scheduler and KWOK's fake nodes on loopback, handing out
//! clients, and stopping them.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::binaries::{self, ETCD, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KWOK};
use crate::certs::Certs;
use crate::error::{Error, Result};
use crate::ports::free_ports;
use crate::process::{Process, Watchdog};
use crate::setup::Version;

/// How often readiness is polled while starting. Loopback answers in well under this.
const POLL: Duration = Duration::from_millis(25);

/// Where the API server is in a control plane's processes (etcd is first).
const APISERVER_INDEX: usize = 1;

/// Options for a control plane; [`TestEnv::builder`] makes one.
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `start` or `shared` is called"]
pub struct TestEnvBuilder {
    binary_dir: Option<PathBuf>,
    controller_manager: bool,
    nodes: usize,
    start_timeout: Duration,
    crd_timeout: Duration,
    webhook_timeout: Duration,
    crds: Vec<CustomResourceDefinition>,
    apiserver_args: Vec<String>,
}

impl Default for TestEnvBuilder {
    fn default() -> Self {
        Self {
            binary_dir: None,
            controller_manager: false,
            nodes: 0,
            start_timeout: Duration::from_secs(60),
            crd_timeout: Duration::from_secs(30),
            webhook_timeout: Duration::from_secs(30),
            crds: Vec::new(),
            apiserver_args: Vec::new(),
        }
    }
}

impl TestEnvBuilder {
    /// Also runs kube-controller-manager with only the garbage collector and namespace
    /// controllers, so owner-reference cascades and namespace deletion happen as in a real
    /// cluster. Off by default: it costs memory and a few seconds until its caches sync.
    pub fn controller_manager(mut self, on: bool) -> Self {
        self.controller_manager = on;
        self
    }

    /// Also runs kube-scheduler and KWOK with `count` fake nodes (`kwok-node-0`, ...), so Pods
    /// are scheduled, get an IP and reach `Running`, and deleting a Pod
    /// completes as on a cluster (KWOK plays the kubelet; no container runs). `start` returns
    /// once every node is `Ready`. Off (0) by default.
    pub fn nodes(mut self, count: usize) -> Self {
        self.nodes = count;
        self
    }

    /// Looks for the binaries in `dir` before `RUDDER_ENVTEST_ASSETS`, the cache and `PATH`.
    pub fn binary_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.binary_dir = Some(dir.into());
        self
    }

    /// How long `start` waits for each process to become ready (default 60 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// How long CRD installs wait for a CRD to be established and served (default 30 s).
    pub fn crd_timeout(mut self, timeout: Duration) -> Self {
        self.crd_timeout = timeout;
        self
    }

    /// How long webhook installs wait until the API server calls the webhooks (default
    /// 30 s); see [`TestNamespace::install_webhooks`](crate::TestNamespace::install_webhooks).
    pub fn webhook_timeout(mut self, timeout: Duration) -> Self {
        self.webhook_timeout = timeout;
        self
    }

    /// CRDs to install (and wait for) before `start` returns. They are established before
    /// kube-controller-manager starts (with [`controller_manager`](Self::controller_manager)),
    /// so its garbage collector knows their kinds from its first discovery and collects the
    /// children of a deleted owner at once. A CRD installed later (`install_crds` on a
    /// running control plane) is learnt at the collector's next discovery pass, up to 30 s
    /// on: give the builder the CRDs a garbage-collection test relies on.
    pub fn crds(mut self, crds: impl IntoIterator<Item = CustomResourceDefinition>) -> Self {
        self.crds.extend(crds);
        self
    }

    /// An extra kube-apiserver flag, such as `--feature-gates=...`. Later flags win.
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// Starts a control plane of its own, owned by the returned value.
    ///
    /// # Errors
    ///
    /// [`Error::BinaryNotFound`] when a binary is missing; [`Error::NotReady`] (with the log's
    /// path and last lines) when a process exits or does not become ready in time.
    pub async fn start(self) -> Result<TestEnv> {
        // A port picked as free can be taken by someone else before the server binds it; one
        // retry on that specific failure makes the race practically invisible.
        match TestEnv::start_once(&self).await {
            Err(Error::NotReady { tail, log, .. }) if tail.contains("address already in use") => {
                tracing::debug!("a picked port was taken meanwhile; starting again");
                // The failed attempt's directory (kept for its logs) is of no use now.
                if let Some(dir) = log.parent().and_then(Path::parent) {
                    let _ = fs::remove_dir_all(dir);
                }
                TestEnv::start_once(&self).await
            }
            other => other,
        }
    }

    /// Returns the control plane shared by the whole test binary, starting it on the first
    /// call. Later calls return the same one; its processes end when the test binary exits.
    ///
    /// Only the `controller_manager` switch and the number of [`nodes`](Self::nodes) may
    /// differ from the first call's options, and only downwards: asking for a controller
    /// manager or more nodes than the shared one has is an error. Other options are taken
    /// from the first call.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start), plus [`Error::SharedMismatch`]. A failed first start is
    /// not remembered: the next call tries again.
    pub async fn shared(self) -> Result<&'static TestEnv> {
        static SHARED: tokio::sync::OnceCell<TestEnv> = tokio::sync::OnceCell::const_new();
        let wants_cm = self.controller_manager;
        let wants_nodes = self.nodes;
        let env = SHARED
            .get_or_try_init(|| async move {
                let mut env = self.start().await?;
                // Never dropped, so the watchdog alone cleans up at exit.
                env.shared = true;
                Ok::<_, Error>(env)
            })
            .await?;
        if wants_cm && !env.controller_manager {
            return Err(Error::SharedMismatch {
                running: "without a controller manager",
                wanted: "one with a controller manager",
            });
        }
        if wants_nodes > env.nodes {
            return Err(Error::SharedMismatch {
                running: "with fewer fake nodes",
                wanted: "more fake nodes",
            });
        }
        Ok(env)
    }
}

/// A running control plane: etcd, kube-apiserver and optionally kube-controller-manager,
/// listening on loopback, with data, certificates and logs in a temporary directory.
///
/// Dropping it (or calling [`stop`](Self::stop)) kills the processes and removes the
/// directory; a watchdog process does the same if the test process dies without dropping it.
#[derive(Debug)]
pub struct TestEnv {
    dir: PathBuf,
    kubeconfig: PathBuf,
    config: kube::Config,
    version: Version,
    processes: Vec<Process>,
    watchdog: Option<Watchdog>,
    started_in: Duration,
    controller_manager: bool,
    nodes: usize,
    crd_timeout: Duration,
    webhook_timeout: Duration,
    start_timeout: Duration,
    shared: bool,
    /// How the API server was started, to start it again after
    /// [`stop_apiserver`](TestEnv::stop_apiserver); `None` until it first started.
    apiserver: Option<ApiServerCommand>,
    /// Whether the API server is stopped ([`TestEnv::stop_apiserver`]).
    apiserver_stopped: bool,
    /// Times the API server was started again.
    apiserver_restarts: usize,
}

/// The API server's binary and arguments, kept to start it again on the same port.
#[derive(Debug, Clone)]
struct ApiServerCommand {
    bin: PathBuf,
    args: Vec<String>,
}

impl TestEnv {
    /// Options for a new control plane.
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder::default()
    }

    /// Starts a control plane with default options; see [`TestEnvBuilder::start`].
    ///
    /// # Errors
    ///
    /// As [`TestEnvBuilder::start`].
    pub async fn start() -> Result<Self> {
        Self::builder().start().await
    }

    /// A new client for this control plane, authenticated as a cluster admin
    /// (`system:masters`).
    ///
    /// Each call builds a fresh client on the current tokio runtime, so a control plane
    /// shared between `#[tokio::test]`s (each with its own runtime) is used safely.
    ///
    /// # Errors
    ///
    /// [`Error::Kube`] if the client cannot be built (for example outside a tokio runtime).
    pub fn client(&self) -> Result<kube::Client> {
        kube::Client::try_from(self.config.clone()).map_err(|source| Error::Kube {
            context: "build a client".to_owned(),
            source,
        })
    }

    /// The client configuration [`client`](Self::client) uses.
    pub fn config(&self) -> &kube::Config {
        &self.config
    }

    /// The kubeconfig file of this control plane (inside its temporary directory; valid
    /// while it runs). `KUBECONFIG=<this path> kubectl get ns` works.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Copies the kubeconfig to `path`, for kubectl or for a binary under test.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the file cannot be written.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        fs::copy(&self.kubeconfig, path)
            .map(|_| ())
            .map_err(|source| Error::Io {
                action: "write the kubeconfig to",
                path: path.to_owned(),
                source,
            })
    }

    /// The API server's version, as its binary reports it.
    pub fn version(&self) -> &Version {
        &self.version
    }

    /// Asks the running API server for its version (`/version`): the same release as
    /// [`version`](Self::version), with the build details the server reports.
    ///
    /// # Errors
    ///
    /// [`Error::Kube`] if the request fails.
    pub async fn server_version(&self) -> Result<k8s_openapi::apimachinery::pkg::version::Info> {
        self.client()?
            .apiserver_version()
            .await
            .map_err(|source| Error::Kube {
                context: "read /version".to_owned(),
                source,
            })
    }

    /// The temporary directory holding data, certificates, the kubeconfig and `logs/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory holding each process's log (`etcd.log`, `kube-apiserver.log`, ...).
    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// The process ids, by name, in start order.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.processes.iter().map(|p| (p.name(), p.pid())).collect()
    }

    /// Whether kube-controller-manager runs.
    pub fn has_controller_manager(&self) -> bool {
        self.controller_manager
    }

    /// The number of fake nodes KWOK plays (0 when kube-scheduler and KWOK do not run); see
    /// [`TestEnvBuilder::nodes`].
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// How long [`start`](TestEnvBuilder::start) took, from finding the binaries to a ready
    /// API server (and installed CRDs).
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Stops the processes and removes the temporary directory. Dropping does the same,
    /// ignoring errors.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the directory cannot be removed.
    pub fn stop(mut self) -> Result<()> {
        self.shutdown()
    }

    /// Kills the API server (SIGKILL), leaving etcd and its data: clients see connections
    /// refused until [`start_apiserver`](Self::start_apiserver) starts it again on the same
    /// port. For tests of what an operator does while an API server is down.
    ///
    /// # Errors
    ///
    /// [`Error::Shared`] for a shared control plane (other tests use it).
    pub fn stop_apiserver(&mut self) -> Result<()> {
        if self.shared {
            return Err(Error::Shared("stop its API server"));
        }
        if let Some(p) = self.processes.get_mut(APISERVER_INDEX) {
            p.kill();
        }
        self.apiserver_stopped = true;
        Ok(())
    }

    /// Starts the API server again after [`stop_apiserver`](Self::stop_apiserver), with the
    /// same arguments, port and certificates (its log goes to `kube-apiserver.<n>.log` in
    /// [`log_dir`](Self::log_dir)), and waits until it is ready. Does nothing if it runs.
    ///
    /// # Errors
    ///
    /// [`Error::Shared`] for a shared control plane; [`Error::NotReady`] if it does not
    /// become ready within the start timeout it was built with (60 s by default).
    pub async fn start_apiserver(&mut self) -> Result<()> {
        if self.shared {
            return Err(Error::Shared("start its API server"));
        }
        if !self.apiserver_stopped {
            return Ok(());
        }
        let Some(command) = self.apiserver.clone() else {
            return Ok(());
        };
        self.apiserver_restarts += 1;
        let log = self
            .log_dir()
            .join(format!("kube-apiserver.{}.log", self.apiserver_restarts));
        let Some(watchdog) = self.watchdog.as_mut() else {
            return Ok(());
        };
        let process = Process::spawn(KUBE_APISERVER, &command.bin, &command.args, log, watchdog)?;
        if let Some(slot) = self.processes.get_mut(APISERVER_INDEX) {
            *slot = process;
        }
        self.apiserver_stopped = false;
        self.wait_for_readyz(APISERVER_INDEX, self.start_timeout)
            .await
    }

    fn shutdown(&mut self) -> Result<()> {
        // Reverse start order: the controller manager and API server first, etcd last, so
        // nothing logs a flood of connection errors on the way down.
        while let Some(mut p) = self.processes.pop() {
            p.kill();
        }
        let removed = match fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
                action: "remove the control plane directory",
                path: self.dir.clone(),
                source: e,
            }),
            _ => Ok(()),
        };
        if let Some(w) = self.watchdog.take() {
            w.disarm();
        }
        removed
    }

    async fn start_once(opts: &TestEnvBuilder) -> Result<Self> {
        let started = Instant::now();
        let explicit = opts.binary_dir.as_deref();
        let apiserver_bin = binaries::find(KUBE_APISERVER, explicit)?;
        let etcd_bin = binaries::find(ETCD, explicit)?;
        let cm_bin = if opts.controller_manager {
            Some(binaries::find(KUBE_CONTROLLER_MANAGER, explicit)?)
        } else {
            None
        };
        let node_bins = if opts.nodes > 0 {
            let kwok = binaries::find(KWOK, explicit)?;
            let stages = binaries::kwok_stages(&kwok)?;
            Some(NodeBinaries {
                scheduler: binaries::find(KUBE_SCHEDULER, explicit)?,
                kwok,
                stages,
            })
        } else {
            None
        };
        let version = binaries::kube_version(&apiserver_bin)?;
        if !version.at_least(1, 20) {
            return Err(Error::UnsupportedVersion {
                found: version.text,
            });
        }

        let dir = make_dir()?;
        let mut watchdog = Watchdog::start(&dir)?;
        let mut env = Self {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            // Replaced by the kubeconfig's once the API server's port is known.
            config: kube::Config::new(http::Uri::from_static("https://127.0.0.1")),
            version,
            processes: Vec::new(),
            watchdog: None,
            started_in: Duration::ZERO,
            controller_manager: opts.controller_manager,
            nodes: opts.nodes,
            crd_timeout: opts.crd_timeout,
            webhook_timeout: opts.webhook_timeout,
            start_timeout: opts.start_timeout,
            shared: false,
            apiserver: None,
            apiserver_stopped: false,
            apiserver_restarts: 0,
        };
        let result = env
            .boot(
                opts,
                &apiserver_bin,
                &etcd_bin,
                cm_bin.as_deref(),
                node_bins.as_ref(),
                &mut watchdog,
            )
            .await;
        match result {
            Ok(()) => {
                env.watchdog = Some(watchdog);
                env.started_in = started.elapsed();
                tracing::info!(
                    version = %env.version,
                    took_ms = env.started_in.as_millis() as u64,
                    dir = %env.dir.display(),
                    "control plane ready"
                );
                Ok(env)
            }
            Err(e) => {
                // Keep the directory so the logs named in the error can be read.
                while let Some(mut p) = env.processes.pop() {
                    p.kill();
                }
                watchdog.disarm();
                env.dir = PathBuf::new();
                Err(e)
            }
        }
    }

    async fn boot(
        &mut self,
        opts: &TestEnvBuilder,
        apiserver_bin: &Path,
        etcd_bin: &Path,
        cm_bin: Option<&Path>,
        node_bins: Option<&NodeBinaries>,
        watchdog: &mut Watchdog,
    ) -> Result<()> {
        let logs = self.dir.join("logs");
        let files = self.write_certificates(&logs)?;
        let [etcd_port, peer_port, api_port] = free_ports()?;

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let etcd_args = etcd_args(&self.dir, &etcd_url, peer_port);
        let etcd = Process::spawn(ETCD, etcd_bin, &etcd_args, logs.join("etcd.log"), watchdog)?;
        self.processes.push(etcd);
        self.wait_for_port(0, etcd_port, opts.start_timeout).await?;

        let server = format!("https://127.0.0.1:{api_port}");
        let mut api_args = apiserver_args(&etcd_url, api_port, &server, &files);
        if node_bins.is_some() {
            // That plugin taints every new node `not-ready` until the node lifecycle
            // controller sees it Ready; that controller does not run here, and KWOK's nodes
            // are Ready from their first status.
            api_args.push(
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition".to_owned(),
            );
        }
        api_args.extend(apiserver_version_flags(&self.version));
        api_args.extend(opts.apiserver_args.iter().cloned());
        let apiserver = Process::spawn(
            KUBE_APISERVER,
            apiserver_bin,
            &api_args,
            logs.join("kube-apiserver.log"),
            watchdog,
        )?;
        self.processes.push(apiserver);
        self.apiserver = Some(ApiServerCommand {
            bin: apiserver_bin.to_owned(),
            args: api_args,
        });
        self.connect(&server, &files, opts.start_timeout).await?;

        // The builder's CRDs are established before the controller manager starts: its
        // garbage collector reads the served kinds from discovery when it starts and again
        // only every 30 s, so an owner of a kind it has not yet seen is collected late (its
        // children waited up to 40 s after the owner went when the CRDs came second).
        if !opts.crds.is_empty() {
            self.install_crds(opts.crds.iter().cloned()).await?;
        }
        if let Some(cm_bin) = cm_bin {
            self.start_controller_manager(cm_bin, &logs, watchdog)?;
        }
        if let Some(bins) = node_bins {
            self.start_nodes(bins, opts.nodes, &logs, opts.start_timeout, watchdog)
                .await?;
        }
        // A controller manager or scheduler that failed on its flags exits at once; say so
        // now rather than letting a cascade or scheduling test time out.
        for p in self.processes.iter_mut().skip(2) {
            if let Some(status) = p.exited() {
                return Err(p.not_ready(format!("exited with {status}")));
            }
        }
        Ok(())
    }

    /// Makes the control plane's directories (logs, certificates, etcd's data) and writes
    /// a fresh CA, serving pair, service-account keys and admin token into them.
    fn write_certificates(&self, logs: &Path) -> Result<CertFiles> {
        let certs_dir = self.dir.join("certs");
        for d in [logs, &certs_dir, &self.dir.join("etcd")] {
            fs::create_dir_all(d).map_err(|source| Error::Io {
                action: "create",
                path: d.to_path_buf(),
                source,
            })?;
        }
        let certs = Certs::generate().map_err(Error::Certificates)?;
        let token = random_token()?;
        let file = |name: &str, text: &str| -> Result<String> {
            let path = certs_dir.join(name);
            fs::write(&path, text).map_err(|source| Error::Io {
                action: "write",
                path: path.clone(),
                source,
            })?;
            Ok(path.display().to_string())
        };
        Ok(CertFiles {
            ca: file("ca.crt", &certs.ca_cert)?,
            tls_cert: file("apiserver.crt", &certs.serving_cert)?,
            tls_key: file("apiserver.key", &certs.serving_key)?,
            sa_key: file("sa.key", &certs.sa_key)?,
            sa_pub: file("sa.pub", &certs.sa_pub)?,
            tokens: file(
                "tokens.csv",
                &format!("{token},admin,admin,system:masters\n"),
            )?,
            token,
        })
    }

    /// Writes the kubeconfig for `server`, loads it as the environment's config, and waits
    /// until the API server is ready and has the `default` namespace.
    async fn connect(&mut self, server: &str, files: &CertFiles, timeout: Duration) -> Result<()> {
        let kubeconfig_text = kubeconfig_yaml(server, &files.ca, &files.token);
        fs::write(&self.kubeconfig, &kubeconfig_text).map_err(|source| Error::Io {
            action: "write the kubeconfig",
            path: self.kubeconfig.clone(),
            source,
        })?;
        let kubeconfig = Kubeconfig::from_yaml(&kubeconfig_text).map_err(Error::Kubeconfig)?;
        self.config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(Error::Kubeconfig)?;
        self.wait_for_readyz(1, timeout).await?;
        self.wait_for_default_namespace(1, timeout).await
    }

    /// Starts kube-controller-manager with only the garbage collector and namespace
    /// controllers.
    fn start_controller_manager(
        &mut self,
        cm_bin: &Path,
        logs: &Path,
        watchdog: &mut Watchdog,
    ) -> Result<()> {
        let mut cm_args = vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            "--controllers=garbagecollector,namespace".to_owned(),
            "--leader-elect=false".to_owned(),
            "--secure-port=0".to_owned(),
        ];
        // It may come from elsewhere than the API server, so ask it for its own version.
        cm_args.extend(controller_manager_version_flags(&binaries::kube_version(
            cm_bin,
        )?));
        let cm = Process::spawn(
            KUBE_CONTROLLER_MANAGER,
            cm_bin,
            &cm_args,
            logs.join("kube-controller-manager.log"),
            watchdog,
        )?;
        self.processes.push(cm);
        Ok(())
    }

    /// Starts kube-scheduler and KWOK, creates `count` fake nodes for KWOK to play, and waits
    /// until every one is `Ready`.
    async fn start_nodes(
        &mut self,
        bins: &NodeBinaries,
        count: usize,
        logs: &Path,
        timeout: Duration,
        watchdog: &mut Watchdog,
    ) -> Result<()> {
        let kubeconfig = format!("--kubeconfig={}", self.kubeconfig.display());
        let scheduler_args = vec![
            kubeconfig.clone(),
            "--leader-elect=false".to_owned(),
            // No serving port: nothing scrapes it, and two control planes would collide.
            "--secure-port=0".to_owned(),
        ];
        let scheduler = Process::spawn(
            KUBE_SCHEDULER,
            &bins.scheduler,
            &scheduler_args,
            logs.join("kube-scheduler.log"),
            watchdog,
        )?;
        self.processes.push(scheduler);
        let kwok_args = vec![
            kubeconfig,
            format!("--config={}", bins.stages.display()),
            "--manage-all-nodes=false".to_owned(),
            format!("--manage-nodes-with-annotation-selector={NODE_ANNOTATION}=fake"),
            // Pod IPs come from a range that reaches nothing, as no container runs.
            "--cidr=10.244.0.0/16".to_owned(),
            "--node-ip=127.0.0.1".to_owned(),
        ];
        let kwok = Process::spawn(
            KWOK,
            &bins.kwok,
            &kwok_args,
            logs.join("kwok.log"),
            watchdog,
        )?;
        self.processes.push(kwok);
        let kwok_idx = self.processes.len() - 1;

        let nodes: kube::Api<Node> = kube::Api::all(self.client()?);
        for i in 0..count {
            let node = fake_node(&format!("kwok-node-{i}"));
            nodes
                .create(&kube::api::PostParams::default(), &node)
                .await
                .map_err(|source| Error::Kube {
                    context: format!("create fake node kwok-node-{i}"),
                    source,
                })?;
        }
        let deadline = Instant::now() + timeout;
        loop {
            let list = nodes
                .list(&kube::api::ListParams::default().labels(&format!("{NODE_LABEL}=fake")))
                .await
                .map_err(|source| Error::Kube {
                    context: "list the fake nodes".to_owned(),
                    source,
                })?;
            let ready = list.items.iter().filter(|n| node_ready(n)).count();
            if ready >= count {
                return Ok(());
            }
            self.check_alive(kwok_idx, deadline, timeout)
                .map_err(|e| e.noting(&format!("{ready} of {count} fake nodes Ready")))?;
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until `port` accepts connections, failing early if process `idx` exits.
    async fn wait_for_port(&mut self, idx: usize, port: u16, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            self.check_alive(idx, deadline, timeout)?;
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until `/readyz` answers `ok`, failing early if process `idx` exits.
    async fn wait_for_readyz(&mut self, idx: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let client = self.client()?;
        loop {
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| self.processes[idx].not_ready(format!("bad request: {e}")))?;
            // A starting server answers 500 for a while, and the client's trace layer logs
            // each as an ERROR: expected here, so kept out of the test's logs.
            let quiet = tracing::instrument::WithSubscriber::with_subscriber(
                client.request_text(request),
                tracing::subscriber::NoSubscriber::default(),
            );
            let answer = tokio::time::timeout(Duration::from_secs(2), quiet);
            let last = match answer.await {
                Ok(Ok(body)) if body.trim() == "ok" => return Ok(()),
                Ok(Ok(body)) => format!("/readyz said {:?}", body.trim()),
                Ok(Err(e)) => format!("/readyz failed: {e}"),
                Err(_) => "/readyz took over 2 s".to_owned(),
            };
            self.check_alive(idx, deadline, timeout)
                .map_err(|e| e.noting(&format!("last check: {last}")))?;
            tokio::time::sleep(POLL).await;
        }
    }

    /// `/readyz` can say `ok` a moment before the API server's bootstrap controller has
    /// created the `default` namespace; tests that use it right away would get a 404.
    async fn wait_for_default_namespace(&mut self, idx: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(self.client()?);
        loop {
            if let Ok(Some(_)) = namespaces.get_opt("default").await {
                return Ok(());
            }
            self.check_alive(idx, deadline, timeout)?;
            tokio::time::sleep(POLL).await;
        }
    }

    fn check_alive(&mut self, idx: usize, deadline: Instant, timeout: Duration) -> Result<()> {
        let p = &mut self.processes[idx];
        if let Some(status) = p.exited() {
            return Err(p.not_ready(format!("exited with {status}")));
        }
        if Instant::now() > deadline {
            return Err(p.not_ready(format!("not ready after {timeout:?}")));
        }
        Ok(())
    }

    pub(crate) fn crd_timeout(&self) -> Duration {
        self.crd_timeout
    }

    pub(crate) fn webhook_timeout(&self) -> Duration {
        self.webhook_timeout
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.shared || self.dir.as_os_str().is_empty() {
            return;
        }
        if let Err(e) = self.shutdown() {
            tracing::warn!(error = %e, "could not clean up the control plane");
        }
    }
}

/// The binaries that make Pods run: the scheduler, KWOK and KWOK's stages file.
struct NodeBinaries {
    scheduler: PathBuf,
    kwok: PathBuf,
    stages: PathBuf,
}

/// The annotation KWOK selects the nodes it plays by (`kwok --manage-nodes-with-annotation-
/// selector`).
const NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// The label on every fake node, for selecting them.
const NODE_LABEL: &str = "type";

/// A node for KWOK to play: KWOK's own stages fill its status (addresses, capacity,
/// conditions) once it exists.
fn fake_node(name: &str) -> Node {
    Node {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            annotations: Some([(NODE_ANNOTATION.to_owned(), "fake".to_owned())].into()),
            labels: Some(
                [
                    (NODE_LABEL, "fake"),
                    ("kubernetes.io/hostname", name),
                    ("kubernetes.io/os", "linux"),
                    ("kubernetes.io/arch", "amd64"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Whether a node's `Ready` condition is `True`.
fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// kube-apiserver flags that depend on its version.
fn apiserver_version_flags(version: &Version) -> Vec<String> {
    let mut flags = Vec::new();
    if !version.at_least(1, 24) {
        // Removed in 1.24. Before, an unset value could open a plain-HTTP port (8080 by
        // default in older releases) that two control planes would fight over.
        flags.push("--insecure-port=0".to_owned());
    }
    flags
}

/// kube-controller-manager flags that depend on its version.
fn controller_manager_version_flags(version: &Version) -> Vec<String> {
    let mut flags = Vec::new();
    if !version.at_least(1, 24) {
        // Its insecure port (10252) went in 1.24; before, two managers would collide on it.
        flags.push("--port=0".to_owned());
    }
    flags
}

/// A fresh, uniquely named directory under the system temporary directory.
fn make_dir() -> Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("rudder-envtest-{}-{n}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            // Left by an earlier process with the same pid that was killed before its
            // watchdog could act; take the next name.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => {
                return Err(Error::Io {
                    action: "create the control plane directory",
                    path: dir,
                    source,
                });
            }
        }
    }
}

/// 128 random bits, hex-encoded, for the admin token.
pub(crate) fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|source| Error::Io {
            action: "read",
            path: PathBuf::from("/dev/urandom"),
            source,
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The files `boot` wrote for the API server, as the paths its flags take, and the admin
/// token.
struct CertFiles {
    ca: String,
    tls_cert: String,
    tls_key: String,
    sa_key: String,
    sa_pub: String,
    tokens: String,
    token: String,
}

/// etcd's flags: its data in `dir`, clients at `etcd_url`, peers on `peer_port`.
fn etcd_args(dir: &Path, etcd_url: &str, peer_port: u16) -> Vec<String> {
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    vec![
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls={etcd_url}"),
        format!("--advertise-client-urls={etcd_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=default={peer_url}"),
    ]
}

/// kube-apiserver's flags every release takes: etcd, the port, the certificates, the token
/// file, the service-account keys, RBAC.
fn apiserver_args(etcd_url: &str, api_port: u16, server: &str, files: &CertFiles) -> Vec<String> {
    vec![
        format!("--etcd-servers={etcd_url}"),
        format!("--secure-port={api_port}"),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--tls-cert-file={}", files.tls_cert),
        format!("--tls-private-key-file={}", files.tls_key),
        format!("--client-ca-file={}", files.ca),
        format!("--token-auth-file={}", files.tokens),
        format!("--service-account-issuer={server}"),
        format!("--service-account-key-file={}", files.sa_pub),
        format!("--service-account-signing-key-file={}", files.sa_key),
        "--authorization-mode=RBAC".to_owned(),
        "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
        "--disable-admission-plugins=ServiceAccount".to_owned(),
        "--allow-privileged=true".to_owned(),
    ]
}

fn kubeconfig_yaml(server: &str, ca: &str, token: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: envtest-admin
  user:
    token: {token}
contexts:
- name: envtest
  context:
    cluster: envtest
    user: envtest-admin
    namespace: default
current-context: envtest
"
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn flags_removed_in_1_24_are_passed_only_to_older_binaries() {
        let old = Version::parse("v1.20.2").unwrap();
        let new = Version::parse("v1.31.0").unwrap();
        assert_eq!(apiserver_version_flags(&old), ["--insecure-port=0"]);
        assert!(apiserver_version_flags(&new).is_empty());
        assert_eq!(controller_manager_version_flags(&old), ["--port=0"]);
        assert!(controller_manager_version_flags(&new).is_empty());
    }

    #[test]
    fn tokens_are_random_hex() {
        let a = random_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, random_token().unwrap());
    }

    #[test]
    fn generated_kubeconfig_parses() {
        let text = kubeconfig_yaml("https://127.0.0.1:1", "/x/ca.crt", "abc");
        let kc = Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("envtest"));
    }
}
