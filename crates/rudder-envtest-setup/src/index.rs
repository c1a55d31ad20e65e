//! controller-tools' index of envtest archives (`envtest-releases.yaml`), and the platform
//! an archive is chosen for.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::version::{Selector, Version};

/// An operating system and CPU architecture as Go and the download sites name them
/// (`linux`/`amd64`, `darwin`/`arm64`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Platform {
    /// `linux`, `darwin`, ...
    pub os: String,
    /// `amd64`, `arm64`, ...
    pub arch: String,
}

impl Platform {
    /// The platform named by Go's `GOOS` and `GOARCH` values.
    pub fn new(os: impl Into<String>, arch: impl Into<String>) -> Self {
        Self {
            os: os.into(),
            arch: arch.into(),
        }
    }

    /// The platform this program runs on, in Go's names: `macos` is `darwin`, `x86_64` is
    /// `amd64`, `aarch64` is `arm64`. Others keep Rust's name, which the index will not have
    /// (a clear [`Error::MissingPlatform`] then).
    pub fn current() -> Self {
        let os = match std::env::consts::OS {
            "macos" => "darwin",
            other => other,
        };
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        Self::new(os, arch)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.arch)
    }
}

/// One archive of the index: `envtest-vX.Y.Z-<os>-<arch>.tar.gz` with its SHA-512 and
/// where to download it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Archive {
    /// The archive's file name.
    pub(crate) name: String,
    /// Its SHA-512, lowercase hex.
    pub(crate) sha512: String,
    /// Where to download it (the index's `selfLink`).
    pub(crate) url: String,
}

/// controller-tools' `envtest-releases.yaml`: for each Kubernetes release, one archive per
/// platform holding `etcd`, `kube-apiserver` and `kubectl`.
///
/// ```yaml
/// releases:
///   v1.37.2:
///     envtest-v1.37.2-linux-amd64.tar.gz:
///       hash: <SHA-512 of the archive, hex>
///       selfLink: https://github.com/kubernetes-sigs/controller-tools/releases/download/envtest-v1.37.2/envtest-v1.37.2-linux-amd64.tar.gz
/// ```
///
/// Releases are keyed in any order; keys that are not releases (`v1.31.0-rc.1`) and
/// archives whose names do not follow the pattern are left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Index {
    releases: BTreeMap<Version, BTreeMap<Platform, Archive>>,
}

#[derive(Deserialize)]
struct RawIndex {
    releases: BTreeMap<String, Option<BTreeMap<String, RawArchive>>>,
}

#[derive(Deserialize)]
struct RawArchive {
    hash: String,
    #[serde(rename = "selfLink")]
    self_link: String,
}

impl Index {
    /// Parses the index's YAML; `url` names it in errors.
    pub(crate) fn parse(yaml: &str, url: &str) -> Result<Self> {
        let raw: RawIndex = serde_yaml::from_str(yaml).map_err(|e| Error::Index {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
        let mut releases = BTreeMap::new();
        for (key, archives) in raw.releases {
            let Some(version) = Version::release(&key) else {
                continue;
            };
            let mut by_platform = BTreeMap::new();
            for (name, archive) in archives.unwrap_or_default() {
                let Some(platform) = archive_platform(&name, &version) else {
                    continue;
                };
                let sha512 = archive.hash.trim().to_ascii_lowercase();
                if !is_sha512(&sha512) {
                    return Err(Error::BadChecksum {
                        url: format!("{url} ({name})"),
                        found: cut(&archive.hash),
                    });
                }
                by_platform.insert(
                    platform,
                    Archive {
                        name,
                        sha512,
                        url: archive.self_link,
                    },
                );
            }
            releases.insert(version, by_platform);
        }
        Ok(Self { releases })
    }

    /// The releases, newest first.
    pub(crate) fn versions(&self) -> impl Iterator<Item = &Version> {
        self.releases.keys().rev()
    }

    /// The archive of `version` for `platform`, if the index has one.
    pub(crate) fn archive(&self, version: &Version, platform: &Platform) -> Option<&Archive> {
        self.releases.get(version)?.get(platform)
    }

    /// The newest release `selector` matches that has an archive for `platform`; `url`
    /// names the index in errors. [`Error::UnknownVersion`] when no release matches,
    /// [`Error::MissingPlatform`] when some do but none for this platform.
    pub(crate) fn select(
        &self,
        selector: &Selector,
        platform: &Platform,
        url: &str,
    ) -> Result<(&Version, &Archive)> {
        let mut matching = self
            .releases
            .iter()
            .rev()
            .filter(|(v, _)| selector.matches(v))
            .peekable();
        let Some((newest, platforms)) = matching.peek().map(|(v, p)| (*v, *p)) else {
            return Err(Error::UnknownVersion {
                selector: selector.to_string(),
                source_name: url.to_owned(),
                available: self.versions().take(10).map(ToString::to_string).collect(),
            });
        };
        matching
            .find_map(|(v, archives)| archives.get(platform).map(|a| (v, a)))
            .ok_or_else(|| Error::MissingPlatform {
                version: newest.to_string(),
                platform: platform.to_string(),
                available: platforms.keys().map(ToString::to_string).collect(),
            })
    }
}

/// The platform of `envtest-v1.37.2-linux-amd64.tar.gz` filed under `v1.37.2`.
fn archive_platform(name: &str, version: &Version) -> Option<Platform> {
    let rest = name
        .strip_prefix("envtest-")?
        .strip_prefix(version.text.as_str())?
        .strip_prefix('-')?
        .strip_suffix(".tar.gz")?;
    let (os, arch) = rest.rsplit_once('-')?;
    (!os.is_empty() && !arch.is_empty()).then(|| Platform::new(os, arch))
}

/// Whether `hex` is 128 lowercase hex digits.
pub(crate) fn is_sha512(hex: &str) -> bool {
    hex.len() == 128 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `text` cut to 200 characters for an error message.
pub(crate) fn cut(text: &str) -> String {
    text.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn entry(version: &str, platform: &str) -> String {
        format!(
            "    envtest-{version}-{platform}.tar.gz:\n      hash: {A}\n      selfLink: https://example.com/envtest-{version}-{platform}.tar.gz\n"
        )
    }

    /// Keys out of order, as upstream writes them, a pre-release, an odd archive name.
    fn index() -> Index {
        let mut yaml = String::from("releases:\n");
        for (version, platforms) in [
            ("v1.36.1", &["linux-amd64", "darwin-arm64"][..]),
            (
                "v1.37.2",
                &["linux-amd64", "linux-arm64", "windows-amd64"][..],
            ),
            ("v1.37.10", &["darwin-arm64"][..]),
            ("v1.38.0-rc.1", &["linux-amd64"][..]),
            ("v1.37.1", &["linux-amd64", "linux-s390x"][..]),
        ] {
            yaml.push_str(&format!("  {version}:\n"));
            for platform in platforms {
                yaml.push_str(&entry(version, platform));
            }
        }
        yaml.push_str(&format!(
            "    checksums.txt:\n      hash: {A}\n      selfLink: https://example.com/x\n"
        ));
        Index::parse(&yaml, "https://example.com/index.yaml").unwrap()
    }

    fn linux() -> Platform {
        Platform::new("linux", "amd64")
    }

    #[test]
    fn reads_the_upstream_layout_newest_first_without_pre_releases() {
        let index = index();
        let versions: Vec<String> = index.versions().map(ToString::to_string).collect();
        assert_eq!(versions, ["v1.37.10", "v1.37.2", "v1.37.1", "v1.36.1"]);
        let archive = index.archive(&Version::new(1, 37, 2), &linux()).unwrap();
        assert_eq!(archive.name, "envtest-v1.37.2-linux-amd64.tar.gz");
        assert_eq!(archive.sha512, A);
        assert_eq!(
            archive.url,
            "https://example.com/envtest-v1.37.2-linux-amd64.tar.gz"
        );
        // `checksums.txt` is not an archive of the pattern: left out, not an error.
        assert_eq!(index.releases[&Version::new(1, 37, 1)].len(), 2);
    }

    #[test]
    fn selects_the_newest_match_this_platform_has() {
        let index = index();
        let pick = |s: &str, p: &Platform| {
            index
                .select(&s.parse().unwrap(), p, "idx")
                .map(|(v, a)| (v.to_string(), a.name.clone()))
        };
        // v1.37.10 is newer but has no linux-amd64 archive: the newest that has one wins.
        assert_eq!(
            pick("1.37", &linux()).unwrap().0,
            "v1.37.2",
            "1.37 on linux/amd64"
        );
        assert_eq!(pick("latest", &linux()).unwrap().0, "v1.37.2");
        assert_eq!(
            pick("1.37.x", &Platform::new("darwin", "arm64")).unwrap().0,
            "v1.37.10"
        );
        assert_eq!(pick("1.37.1", &linux()).unwrap().0, "v1.37.1");
        assert_eq!(
            pick("", &Platform::new("darwin", "arm64")).unwrap().1,
            "envtest-v1.37.10-darwin-arm64.tar.gz"
        );
    }

    #[test]
    fn an_unknown_version_names_what_there_is() {
        let err = index()
            .select(
                &"1.99".parse().unwrap(),
                &linux(),
                "https://example.com/i.yaml",
            )
            .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::UnknownVersion { .. }), "{text}");
        assert_eq!(
            text,
            "no release matches 1.99.x in https://example.com/i.yaml \
             (there: v1.37.10, v1.37.2, v1.37.1, v1.36.1)"
        );
        // A pre-release is not a release.
        assert!(matches!(
            index().select(&"1.38".parse().unwrap(), &linux(), "i"),
            Err(Error::UnknownVersion { .. })
        ));
    }

    #[test]
    fn a_missing_platform_names_the_platforms_there_are() {
        let err = index()
            .select(
                &"1.37.2".parse().unwrap(),
                &Platform::new("darwin", "arm64"),
                "i",
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "v1.37.2 has no archive for darwin/arm64 (there: linux/amd64, linux/arm64, windows/amd64)"
        );
        let err = index()
            .select(
                &"1.37".parse().unwrap(),
                &Platform::new("linux", "riscv64"),
                "i",
            )
            .unwrap_err();
        assert!(
            matches!(&err, Error::MissingPlatform { version, .. } if version == "v1.37.10"),
            "{err}"
        );
    }

    #[test]
    fn a_malformed_index_is_an_error_not_an_empty_one() {
        for (yaml, what) in [
            ("releases: [1, 2]", "releases as a list"),
            (
                "releases:\n  v1.37.2:\n    envtest-v1.37.2-linux-amd64.tar.gz:\n      hash: abc\n",
                "no selfLink",
            ),
            ("<html>rate limited</html>", "not YAML of the index"),
            ("kind: ConfigMap\n", "no releases"),
        ] {
            assert!(
                matches!(Index::parse(yaml, "i"), Err(Error::Index { .. })),
                "{what}"
            );
        }
        let short = "releases:\n  v1.37.2:\n    envtest-v1.37.2-linux-amd64.tar.gz:\n      hash: abc\n      selfLink: x\n";
        assert!(matches!(
            Index::parse(short, "i"),
            Err(Error::BadChecksum { .. })
        ));
        // Empty, and a release without archives, are valid and hold nothing to install.
        assert_eq!(Index::parse("releases: {}", "i").unwrap(), Index::default());
        let bare = Index::parse("releases:\n  v1.37.2:\n", "i").unwrap();
        assert!(matches!(
            bare.select(&Selector::Any, &linux(), "i"),
            Err(Error::MissingPlatform { .. })
        ));
    }

    #[test]
    fn the_current_platform_uses_gos_names() {
        let p = Platform::current();
        assert!(!p.os.is_empty() && !p.arch.is_empty());
        assert_ne!(p.os, "macos");
        assert_ne!(p.arch, "x86_64");
        assert_ne!(p.arch, "aarch64");
        assert_eq!(Platform::new("linux", "amd64").to_string(), "linux/amd64");
    }
}
