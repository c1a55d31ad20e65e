//! Kubernetes release versions, and the selectors (`1.37.2`, `1.37`, `1.37.x`, latest) that
//! pick one.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// A Kubernetes version: a release as the index and the cache name it (`v1.37.2`), or what
/// `kube-apiserver --version` reports.
///
/// Versions order by their numbers, so the newest sorts last.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// The major version (1).
    pub major: u32,
    /// The minor version (20 for v1.20.2).
    pub minor: u32,
    /// The patch version (2 for v1.20.2).
    pub patch: u32,
    /// The version text as reported, for example `v1.20.2`.
    pub text: String,
}

impl Version {
    /// Parses the first word that looks like a version in `text`: `v1.20.2`,
    /// `Kubernetes v1.20.2` or `v1.31.0-alpha.1+abc` (whose numbers are 1.31.0). `None` when
    /// no word does.
    pub fn parse(text: &str) -> Option<Self> {
        let word = text
            .split_whitespace()
            .find(|w| w.starts_with('v') && w[1..].starts_with(|c: char| c.is_ascii_digit()))?;
        let core = word[1..].split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.').map(str::parse::<u32>);
        let major = parts.next()?.ok()?;
        let minor = parts.next()?.ok()?;
        let patch = parts.next().unwrap_or(Ok(0)).ok()?;
        Some(Self {
            major,
            minor,
            patch,
            text: word.to_owned(),
        })
    }

    /// A release: `vX.Y.Z` or `X.Y.Z` and nothing else (no pre-release, no build, no other
    /// words), with its text normalised to `vX.Y.Z`.
    pub fn release(text: &str) -> Option<Self> {
        let digits = text.strip_prefix('v').unwrap_or(text);
        let mut parts = digits.split('.');
        let mut number = || -> Option<u32> {
            let part = parts.next()?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            part.parse().ok()
        };
        let (major, minor, patch) = (number()?, number()?, number()?);
        if parts.next().is_some() {
            return None;
        }
        Some(Self::new(major, minor, patch))
    }

    /// The release `vMAJOR.MINOR.PATCH`.
    pub fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
            text: format!("v{major}.{minor}.{patch}"),
        }
    }

    /// Whether this version is at least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Which releases a command means: the newest of those it matches is installed or used.
///
/// Parsed from what a user types: `1.37.2` (or `v1.37.2`) is that release, `1.37`, `1.37.x`
/// and `1.37.*` any patch of 1.37, and `latest` (or nothing, [`Selector::Any`]) any release.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Selector {
    /// Any release.
    #[default]
    Any,
    /// Any patch release of one minor version.
    Minor {
        /// The major version (1).
        major: u32,
        /// The minor version (37 for 1.37.x).
        minor: u32,
    },
    /// Exactly this release.
    Exact(Version),
}

impl Selector {
    /// Whether `version` is one of the releases this selector means.
    pub fn matches(&self, version: &Version) -> bool {
        match self {
            Self::Any => true,
            Self::Minor { major, minor } => (version.major, version.minor) == (*major, *minor),
            Self::Exact(exact) => {
                (version.major, version.minor, version.patch)
                    == (exact.major, exact.minor, exact.patch)
            }
        }
    }
}

impl FromStr for Selector {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.eq_ignore_ascii_case("latest") {
            return Ok(Self::Any);
        }
        if let Some(version) = Version::release(trimmed) {
            return Ok(Self::Exact(version));
        }
        let digits = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let minor_part = digits
            .strip_suffix(".x")
            .or_else(|| digits.strip_suffix(".X"))
            .or_else(|| digits.strip_suffix(".*"))
            .unwrap_or(digits);
        let number = |part: &str| -> Option<u32> {
            (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse().ok())
                .flatten()
        };
        match minor_part.split_once('.') {
            Some((major, minor)) => match (number(major), number(minor)) {
                (Some(major), Some(minor)) => Ok(Self::Minor { major, minor }),
                _ => Err(Error::InvalidSelector(text.to_owned())),
            },
            None => Err(Error::InvalidSelector(text.to_owned())),
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("latest"),
            Self::Minor { major, minor } => write!(f, "{major}.{minor}.x"),
            Self::Exact(version) => write!(f, "{version}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(text: &str) -> Selector {
        text.parse().unwrap()
    }

    #[test]
    fn parses_versions_as_kube_apiserver_prints_them() {
        let v = Version::parse("Kubernetes v1.20.2\n").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (1, 20, 2));
        assert_eq!(v.to_string(), "v1.20.2");
        let v = Version::parse("Kubernetes v1.31.0-alpha.1+abc").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (1, 31, 0));
        assert!(v.at_least(1, 24));
        assert!(!Version::parse("v1.20.2").unwrap().at_least(1, 24));
        assert!(Version::parse("Kubernetes").is_none());
        assert!(Version::parse("vx.1").is_none());
    }

    #[test]
    fn a_release_is_three_numbers_and_nothing_else() {
        assert_eq!(Version::release("v1.37.2"), Some(Version::new(1, 37, 2)));
        assert_eq!(Version::release("1.37.2").unwrap().text, "v1.37.2");
        for text in [
            "v1.37",
            "v1.37.2.1",
            "v1.31.0-alpha.1",
            "v1.37.2+abc",
            "1..2",
            "v1.37.x",
            "",
            "x1.37.2",
            "v1.37.+2",
        ] {
            assert_eq!(Version::release(text), None, "{text:?}");
        }
    }

    #[test]
    fn newer_versions_sort_last() {
        let a = Version::parse("v1.20.2").unwrap();
        let b = Version::parse("v1.9.0").unwrap();
        assert!(a > b);
        assert!(Version::new(1, 37, 10) > Version::new(1, 37, 9));
    }

    #[test]
    fn selectors_parse_as_users_type_them() {
        assert_eq!(selector(""), Selector::Any);
        assert_eq!(selector("latest"), Selector::Any);
        assert_eq!(selector("1.37.2"), Selector::Exact(Version::new(1, 37, 2)));
        assert_eq!(selector("v1.37.2"), Selector::Exact(Version::new(1, 37, 2)));
        for minor in ["1.37", "v1.37", "1.37.x", "1.37.X", "1.37.*", " 1.37.x "] {
            assert_eq!(
                selector(minor),
                Selector::Minor {
                    major: 1,
                    minor: 37
                },
                "{minor:?}"
            );
        }
        for bad in [
            "1",
            "1.x",
            "one.two",
            "1.37.2.1",
            "1.37.2-rc.1",
            "1.37.y",
            "..",
            "1.",
        ] {
            assert!(
                matches!(bad.parse::<Selector>(), Err(Error::InvalidSelector(ref t)) if t == bad),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn selectors_match_what_they_name() {
        let v = Version::new(1, 37, 2);
        assert!(Selector::Any.matches(&v));
        assert!(selector("1.37").matches(&v));
        assert!(!selector("1.36").matches(&v));
        assert!(!selector("2.37").matches(&v));
        assert!(selector("1.37.2").matches(&v));
        assert!(!selector("1.37.1").matches(&v));
        // A version read from a binary matches by its numbers, whatever its text.
        assert!(selector("1.31.0").matches(&Version::parse("v1.31.0-alpha.1").unwrap()));
    }

    #[test]
    fn selectors_print_as_they_are_typed() {
        assert_eq!(selector("").to_string(), "latest");
        assert_eq!(selector("1.37").to_string(), "1.37.x");
        assert_eq!(selector("1.37.2").to_string(), "v1.37.2");
    }
}
