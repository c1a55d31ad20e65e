//! The `cargo rudder` command line: its help and its arguments, parsed into the library's
//! options.

use std::path::PathBuf;

use crate::controller::{ControllerOptions, new_controller};
use crate::error::{Error, Result};
use crate::operator::{OperatorOptions, new_operator};
use crate::source::{RudderSource, absolute};

/// `cargo rudder --help`.
pub const HELP: &str = "\
cargo rudder <command>

Scaffolds for operators on Rudder, a controller runtime for Kubernetes.

Commands:
  new PATH [--kind KIND] [--group GROUP] [--version VERSION] [--webhook | --multi-cluster]
      [SOURCE]
      A Cargo workspace at PATH (which must not exist) for an operator of your own: the
      crate operator/ (a custom resource KIND, default the last part of PATH in PascalCase,
      in API group GROUP, default NAME.example.com, version VERSION, default v1, with a
      sample in config/samples/; its reconciler; a manager with probes,
      metrics and leader election; the manifests it renders), xtask/ (cargo xtask test |
      manifests | run), a README and a test against a real API server. With --webhook, also
      a defaulting and a validating webhook for KIND (operator/src/webhook.rs), served with
      certificates the operator makes itself when deployed, and a test of them called by
      the real API server. With --multi-cluster, the controller runs in each member cluster
      of a fleet instead of the operator's own (rudder::multicluster): a member is a Secret
      labelled sigs.k8s.io/multicluster-runtime-kubeconfig=true holding its kubeconfig
      under `kubeconfig`, in the namespace the operator's --fleet-namespace names (default
      its own) of the cluster it runs in; each member needs the CRD installed.

  new-controller NAME [--kind KIND] [--group GROUP] [--version VERSION] [--workspace DIR]
      [SOURCE]
      A controller crate NAME in the workspace that encloses the current directory (or
      DIR), at its root's NAME/: a custom resource KIND in API group GROUP (defaults as
      above), a reconciler, an operator binary and a test against a real API server. It
      inherits what the workspace declares (package fields, dependencies, lints) and states
      the rest; `cargo new` adds it to the workspace's members if no glob covers it.

  envtest use [VERSION] [-p path|env] [--with LIST] [--offline] [MIRRORS] [--dir DIR]
      A control plane for rudder-envtest's tests, by download: the newest Kubernetes
      release VERSION matches (1.37.2; 1.37 or 1.37.x for its newest patch; default the
      newest of all) from controller-tools' envtest index (kube-apiserver, etcd, kubectl),
      kube-controller-manager and kube-scheduler from Kubernetes' release downloads, KWOK
      from its GitHub release, each checked against its published SHA-512 (KWOK publishes
      none) and installed as a whole in ~/.cache/rudder/envtest/vX.Y.Z/ (under
      $XDG_CACHE_HOME if set), where tests find it. Prints that directory, or with -p env
      `export RUDDER_ENVTEST_ASSETS=DIR` to pin a test run to it. --with LIST: the extra
      binaries, from controller-manager,scheduler,kwok (default all; none for the API
      server and etcd alone). --offline downloads nothing: the newest installed match, or
      an error.

  envtest list [-i] [MIRRORS] [--dir DIR]
      The releases the index has for this platform, those installed with their directory;
      with -i (--installed), only those installed, without reading the index.

  envtest cleanup [VERSION] [--dir DIR]
      Removes the installed releases VERSION matches (default: all of them).

  help
      This text.

SOURCE, where the generated code takes Rudder from (default: crates.io, rudder-runtime = \"0.1\"):
  --rudder-path DIR           a checkout of Rudder's repository, by path; `new` also
                              copies its Cargo.lock, so the project builds with the
                              versions Rudder is tested with
  --rudder-git URL            a git repository of Rudder
      [--rudder-rev REV]      at a branch, tag or commit
For new-controller, SOURCE applies only when the workspace declares no `rudder-runtime` itself.

MIRRORS, for envtest (default: the upstream sites):
  --index-url URL             an envtest-releases.yaml in controller-tools' layout; its
                              selfLinks say where each archive is
  --release-url URL           Kubernetes' release layout: URL/vX.Y.Z/bin/OS/ARCH/NAME and
                              NAME.sha512 beside it
  --kwok-url URL              KWOK's release layout: URL/vX.Y.Z/kwok-OS-ARCH
--dir DIR installs under DIR/vX.Y.Z/ instead; tests find it there through
RUDDER_ENVTEST_ASSETS (-p env).

NAME (and PATH's last part): lowercase letters, digits and single '-', at most 40, starting
with a letter.";

/// Runs `cargo rudder` with `args` (the program's arguments after its name; a leading
/// `rudder`, which cargo passes to a `cargo-rudder` it runs, is skipped). Returns what to
/// print on success.
pub fn run(args: &[String]) -> Result<String> {
    let args = match args {
        [first, rest @ ..] if first == "rudder" => rest,
        all => all,
    };
    let Some((command, rest)) = args.split_first() else {
        return Ok(HELP.to_owned());
    };
    if command == "envtest" {
        if rest.iter().any(|a| a == "--help" || a == "-h") {
            return Ok(HELP.to_owned());
        }
        return crate::envtest::run(rest);
    }
    let parsed = Parsed::parse(rest)?;
    if parsed.help {
        return Ok(HELP.to_owned());
    }
    match command.as_str() {
        "new" => {
            parsed.refuse(&["--workspace"], "new")?;
            let path = parsed.positional("new", "a path")?;
            let options = OperatorOptions {
                kind: parsed.kind.clone(),
                group: parsed.group.clone(),
                version: parsed.version.clone(),
                webhook: parsed.webhook,
                multi_cluster: parsed.multi_cluster,
                rudder: parsed.source()?,
            };
            let dir = new_operator(&PathBuf::from(path), &options)?;
            Ok(format!(
                "created {dir}\n\nnext, in {dir}:\n  \
                 cargo xtask test                                   # the operator against a real API server\n  \
                 cargo xtask manifests --image IMAGE | kubectl apply -f -   # deploy it",
                dir = dir.display()
            ))
        }
        "new-controller" => {
            parsed.refuse(&["--webhook", "--multi-cluster"], "new-controller")?;
            let name = parsed.positional("new-controller", "a name")?;
            let base = parsed
                .workspace
                .clone()
                .unwrap_or_else(|| PathBuf::from("."));
            let root = crate::controller::workspace_root(&absolute(&base)?)?;
            let options = ControllerOptions {
                kind: parsed.kind.clone(),
                group: parsed.group.clone(),
                version: parsed.version.clone(),
                rudder: parsed.source()?,
            };
            let dir = new_controller(&root.join(name), &options)?;
            Ok(format!(
                "created {dir}: a controller for {name}'s custom resource\n\nnext:\n  \
                 cargo test -p {name}                 # against a real API server\n  \
                 cargo run -p {name} -- --crd         # the CRD, for `kubectl apply -f -`\n  \
                 cargo run -p {name}                  # the operator, on the cluster your kubeconfig names",
                dir = dir.display()
            ))
        }
        "help" | "--help" | "-h" => Ok(HELP.to_owned()),
        other => Err(Error::Invalid(format!(
            "unknown command {other:?}: `cargo rudder help` lists them"
        ))),
    }
}

/// Every flag any command takes, and the positional arguments.
#[derive(Debug, Default)]
struct Parsed {
    positional: Vec<String>,
    kind: Option<String>,
    group: Option<String>,
    version: Option<String>,
    webhook: bool,
    multi_cluster: bool,
    workspace: Option<PathBuf>,
    rudder_path: Option<PathBuf>,
    rudder_git: Option<String>,
    rudder_rev: Option<String>,
    help: bool,
    seen: Vec<String>,
}

impl Parsed {
    fn parse(args: &[String]) -> Result<Self> {
        let mut parsed = Self::default();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
                _ => (arg.as_str(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| args.next().cloned())
                    .ok_or_else(|| Error::Invalid(format!("{flag} needs a value")))
            };
            match flag {
                "--help" | "-h" => parsed.help = true,
                "--webhook" => parsed.webhook = true,
                "--multi-cluster" => parsed.multi_cluster = true,
                "--kind" => parsed.kind = Some(value()?),
                "--group" => parsed.group = Some(value()?),
                "--version" => parsed.version = Some(value()?),
                "--workspace" => parsed.workspace = Some(value()?.into()),
                "--rudder-path" => parsed.rudder_path = Some(value()?.into()),
                "--rudder-git" => parsed.rudder_git = Some(value()?),
                "--rudder-rev" => parsed.rudder_rev = Some(value()?),
                other if other.starts_with('-') => {
                    return Err(Error::Invalid(format!(
                        "unknown flag {other:?}: `cargo rudder help` lists each command's flags"
                    )));
                }
                _ => parsed.positional.push(arg.clone()),
            }
            if flag.starts_with('-') {
                parsed.seen.push(flag.to_owned());
            }
        }
        Ok(parsed)
    }

    /// Fails if a flag of another command was given to `command`.
    fn refuse(&self, flags: &[&str], command: &str) -> Result<()> {
        match self.seen.iter().find(|seen| flags.contains(&seen.as_str())) {
            Some(flag) => Err(Error::Invalid(format!(
                "{command} takes no {flag}: `cargo rudder help` lists each command's flags"
            ))),
            None => Ok(()),
        }
    }

    /// The one positional argument `command` takes.
    fn positional(&self, command: &str, what: &str) -> Result<&str> {
        match self.positional.as_slice() {
            [one] => Ok(one),
            [] => Err(Error::Invalid(format!("{command} needs {what}"))),
            [_, extra, ..] => Err(Error::Invalid(format!(
                "{command} takes one argument; unexpected {extra:?}"
            ))),
        }
    }

    /// The source the flags name.
    fn source(&self) -> Result<RudderSource> {
        match (&self.rudder_path, &self.rudder_git, &self.rudder_rev) {
            (Some(_), Some(_), _) => Err(Error::Invalid(
                "--rudder-path and --rudder-git name two sources: give one".to_owned(),
            )),
            (_, None, Some(_)) => Err(Error::Invalid("--rudder-rev needs --rudder-git".to_owned())),
            (Some(path), None, None) => Ok(RudderSource::Path(absolute(path)?)),
            (None, Some(url), rev) => Ok(RudderSource::Git {
                url: url.clone(),
                rev: rev.clone(),
            }),
            (None, None, None) => Ok(RudderSource::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn help_comes_with_or_without_cargos_rudder_argument() {
        for line in [
            "",
            "rudder",
            "rudder help",
            "help",
            "--help",
            "rudder new --help",
        ] {
            assert!(
                matches!(run(&args(line)), Ok(help) if help == HELP),
                "{line:?}"
            );
        }
    }

    #[test]
    fn bad_arguments_are_refused_before_anything_is_written() {
        for line in [
            "rudder new",
            "rudder new a b",
            "rudder new x --frobnicate",
            "rudder new x --kind",
            "rudder new x --workspace .",
            "rudder new-controller x --webhook",
            "rudder new-controller x --multi-cluster",
            "rudder new x --webhook --multi-cluster",
            "rudder new x --rudder-rev main",
            "rudder new x --rudder-path /a --rudder-git https://example.com/r",
            "rudder launch",
        ] {
            assert!(
                matches!(run(&args(line)), Err(Error::Invalid(_))),
                "{line:?}"
            );
        }
    }
}
