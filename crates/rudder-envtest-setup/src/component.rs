//! What an install holds: the archive's binaries, and the optional components
//! (kube-controller-manager, kube-scheduler, KWOK with its stages), each from its own
//! release site.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The KWOK release installed with [`Component::Kwok`].
pub const KWOK_VERSION: &str = "0.8.0";

/// The API server's file name.
pub(crate) const KUBE_APISERVER: &str = "kube-apiserver";
/// etcd's file name.
pub(crate) const ETCD: &str = "etcd";
/// kubectl's file name: in the archive, installed beside the others, needed by nothing.
pub(crate) const KUBECTL: &str = "kubectl";
/// What every install has: what rudder-envtest needs to start a control plane.
pub(crate) const REQUIRED: [&str; 2] = [KUBE_APISERVER, ETCD];
/// KWOK's stages beside its binary, where rudder-envtest looks for them.
pub(crate) const KWOK_STAGES: &str = "kwok-stages.yaml";

/// KWOK v0.8.0's stages, as `cargo xtask envtest install` assembles them from the
/// `sigs.k8s.io/kwok` module (KWOK publishes no such file with its binaries): nodes become
/// Ready and renew their Lease; Pods get an IP, run, complete when they belong to a Job, and
/// go away once deleted.
pub(crate) const KWOK_STAGES_YAML: &str = include_str!("kwok-stages.yaml");

/// A part of the control plane beyond the API server and etcd, each installed only when
/// asked for ([`Installer::components`](crate::Installer::components); all by default).
///
/// rudder-envtest's `controller_manager(true)` needs [`Component::ControllerManager`], and
/// `nodes(n)` needs [`Component::Scheduler`] and [`Component::Kwok`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Component {
    /// `kube-controller-manager`, from the Kubernetes release downloads, verified against
    /// the `.sha512` published beside it.
    ControllerManager,
    /// `kube-scheduler`, from the Kubernetes release downloads, verified the same way.
    Scheduler,
    /// `kwok` ([`KWOK_VERSION`]) from KWOK's GitHub release, which publishes no checksums,
    /// and its stages (`kwok-stages.yaml`), which this crate carries.
    Kwok,
}

impl Component {
    /// Every component, in install order.
    pub const ALL: [Self; 3] = [Self::ControllerManager, Self::Scheduler, Self::Kwok];

    /// The name a user types: `controller-manager`, `scheduler`, `kwok`.
    pub fn name(self) -> &'static str {
        match self {
            Self::ControllerManager => "controller-manager",
            Self::Scheduler => "scheduler",
            Self::Kwok => "kwok",
        }
    }

    /// The files it puts in a version's directory; the binary comes last, so a binary found
    /// there has what it needs beside it.
    pub fn files(self) -> &'static [&'static str] {
        match self {
            Self::ControllerManager => &["kube-controller-manager"],
            Self::Scheduler => &["kube-scheduler"],
            Self::Kwok => &[KWOK_STAGES, "kwok"],
        }
    }

    /// Parses a comma-separated list: names, `all` or `none`. Repeats count once.
    pub fn parse_list(text: &str) -> Result<Vec<Self>> {
        let mut list = Vec::new();
        for word in text.split(',').map(str::trim) {
            match word {
                "all" => list.extend(Self::ALL),
                "none" | "" => {}
                name => list.push(name.parse()?),
            }
        }
        list.sort();
        list.dedup();
        Ok(list)
    }
}

impl FromStr for Component {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text.trim() {
            "controller-manager" | "kube-controller-manager" => Ok(Self::ControllerManager),
            "scheduler" | "kube-scheduler" => Ok(Self::Scheduler),
            "kwok" => Ok(Self::Kwok),
            other => Err(Error::InvalidComponent(other.to_owned())),
        }
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[test]
    fn component_lists_parse_names_all_and_none() {
        assert_eq!(Component::parse_list("all").unwrap(), Component::ALL);
        assert_eq!(Component::parse_list("none").unwrap(), []);
        assert_eq!(
            Component::parse_list("kwok, scheduler,kwok").unwrap(),
            [Component::Scheduler, Component::Kwok]
        );
        assert_eq!(
            Component::parse_list("kube-controller-manager").unwrap(),
            [Component::ControllerManager]
        );
        assert!(matches!(
            Component::parse_list("scheduler,kubelet"),
            Err(Error::InvalidComponent(ref name)) if name == "kubelet"
        ));
    }

    #[test]
    fn names_round_trip() {
        for c in Component::ALL {
            assert_eq!(c.name().parse::<Component>().unwrap(), c);
            assert_eq!(c.to_string(), c.name());
        }
    }

    #[test]
    fn the_stages_are_kwoks_stage_objects() {
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(KWOK_STAGES_YAML)
            .map(serde_yaml::Value::deserialize)
            .collect::<Result<_, _>>()
            .unwrap();
        let kinds: Vec<_> = docs
            .iter()
            .filter(|d| !d.is_null())
            .map(|d| (d["apiVersion"].as_str(), d["kind"].as_str()))
            .collect();
        assert!(kinds.len() >= 5, "{kinds:?}");
        for kind in kinds {
            assert_eq!(kind, (Some("kwok.x-k8s.io/v1alpha1"), Some("Stage")));
        }
    }
}
