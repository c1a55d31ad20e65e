//! `cargo rudder envtest use | list | cleanup`: rudder-envtest-setup's installer as commands,
//! so a project outside Rudder's repository gets a test control plane by download.

use std::io::Write;
use std::path::PathBuf;

use rudder_envtest_setup::{ASSETS_ENV, Component, Installer, Selector};

use crate::error::{Error, Result};
use crate::source::absolute;

/// Runs `cargo rudder envtest <verb> ...` (`args` starts at the verb). Progress of downloads
/// goes to stderr; the result, returned, is what to print on stdout.
pub(crate) fn run(args: &[String]) -> Result<String> {
    let Some((verb, rest)) = args.split_first() else {
        return Err(Error::Invalid(
            "envtest needs a command: use, list or cleanup (`cargo rudder help`)".to_owned(),
        ));
    };
    let flags = Flags::parse(rest)?;
    match verb.as_str() {
        "use" => {
            flags.refuse(&["-i", "--installed"], "envtest use")?;
            let selector = flags.selector("envtest use")?;
            let installed = flags.installer()?.ensure(&selector)?;
            Ok(match flags.print {
                Print::Path => installed.dir.display().to_string(),
                Print::Env => format!(
                    "export {ASSETS_ENV}={}",
                    shell_quote(&installed.dir.display().to_string())
                ),
            })
        }
        "list" => {
            flags.refuse(&["-p", "--print", "--with"], "envtest list")?;
            if !flags.positional.is_empty() {
                return Err(Error::Invalid("envtest list takes no version".to_owned()));
            }
            let offline = flags.offline || flags.installed;
            let installer = flags.installer()?.offline(offline);
            let rows: Vec<(String, String)> = installer
                .list()?
                .into_iter()
                .map(|row| {
                    let state = match &row.installed {
                        Some(dir) => format!("installed  {}", dir.display()),
                        None => "available".to_owned(),
                    };
                    (row.version.to_string(), state)
                })
                .collect();
            if rows.is_empty() {
                let dir = installer.dir().display();
                return Ok(if offline {
                    format!("nothing installed in {dir}")
                } else {
                    format!(
                        "nothing installed in {dir}, and the index has no release for this platform"
                    )
                });
            }
            let width = rows.iter().map(|(v, _)| v.len()).max().unwrap_or_default();
            Ok(rows
                .iter()
                .map(|(version, state)| format!("{version:width$}  {state}"))
                .collect::<Vec<_>>()
                .join("\n"))
        }
        "cleanup" => {
            flags.refuse(
                &[
                    "-p",
                    "--print",
                    "--with",
                    "-i",
                    "--installed",
                    "--offline",
                    "--index-url",
                    "--release-url",
                    "--kwok-url",
                ],
                "envtest cleanup",
            )?;
            let selector = flags.selector("envtest cleanup")?;
            let installer = flags.installer()?;
            let removed = installer.cleanup(&selector)?;
            Ok(if removed.is_empty() {
                format!(
                    "nothing to remove: no install matches {selector} in {}",
                    installer.dir().display()
                )
            } else {
                removed
                    .iter()
                    .map(|dir| format!("removed {}", dir.display()))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        }
        other => Err(Error::Invalid(format!(
            "unknown envtest command {other:?}: use, list or cleanup (`cargo rudder help`)"
        ))),
    }
}

/// What `use` prints.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Print {
    /// The release's directory.
    #[default]
    Path,
    /// `export RUDDER_ENVTEST_ASSETS=<directory>`, for `eval`.
    Env,
}

/// Every flag an envtest command takes, and the positional arguments.
#[derive(Debug, Default)]
struct Flags {
    positional: Vec<String>,
    print: Print,
    with: Option<Vec<Component>>,
    dir: Option<PathBuf>,
    index_url: Option<String>,
    release_url: Option<String>,
    kwok_url: Option<String>,
    offline: bool,
    installed: bool,
    seen: Vec<String>,
}

impl Flags {
    fn parse(args: &[String]) -> Result<Self> {
        let mut flags = Self::default();
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
                "-p" | "--print" => {
                    flags.print = match value()?.as_str() {
                        "path" => Print::Path,
                        "env" => Print::Env,
                        other => {
                            return Err(Error::Invalid(format!(
                                "{flag} takes path or env, not {other:?}"
                            )));
                        }
                    };
                }
                "--with" => flags.with = Some(Component::parse_list(&value()?)?),
                "--dir" => flags.dir = Some(value()?.into()),
                "--index-url" => flags.index_url = Some(value()?),
                "--release-url" => flags.release_url = Some(value()?),
                "--kwok-url" => flags.kwok_url = Some(value()?),
                "--offline" => flags.offline = true,
                "-i" | "--installed" => flags.installed = true,
                other if other.starts_with('-') => {
                    return Err(Error::Invalid(format!(
                        "unknown flag {other:?}: `cargo rudder help` lists each command's flags"
                    )));
                }
                _ => flags.positional.push(arg.clone()),
            }
            if flag.starts_with('-') {
                flags.seen.push(flag.to_owned());
            }
        }
        Ok(flags)
    }

    /// Fails if a flag of another command was given to `command`.
    fn refuse(&self, refused: &[&str], command: &str) -> Result<()> {
        match self
            .seen
            .iter()
            .find(|seen| refused.contains(&seen.as_str()))
        {
            Some(flag) => Err(Error::Invalid(format!(
                "{command} takes no {flag}: `cargo rudder help` lists each command's flags"
            ))),
            None => Ok(()),
        }
    }

    /// The optional VERSION: the releases it matches, all when absent.
    fn selector(&self, command: &str) -> Result<Selector> {
        match self.positional.as_slice() {
            [] => Ok(Selector::Any),
            [one] => Ok(one.parse()?),
            [_, extra, ..] => Err(Error::Invalid(format!(
                "{command} takes one version; unexpected {extra:?}"
            ))),
        }
    }

    /// The installer the flags describe, reporting progress on stderr.
    fn installer(&self) -> Result<Installer> {
        let mut installer = match &self.dir {
            Some(dir) => Installer::with_dir(absolute(dir)?),
            None => Installer::new()?,
        };
        if let Some(url) = &self.index_url {
            installer = installer.index_url(url);
        }
        if let Some(url) = &self.release_url {
            installer = installer.release_url(url);
        }
        if let Some(url) = &self.kwok_url {
            installer = installer.kwok_url(url);
        }
        if let Some(with) = &self.with {
            installer = installer.components(with.iter().copied());
        }
        Ok(installer.offline(self.offline).on_progress(|progress| {
            // Progress is for a person watching; stdout is kept for the result, so that
            // `$(cargo rudder envtest use)` is the directory alone. A closed stderr is no
            // reason to stop an install.
            let _ = writeln!(std::io::stderr(), "{progress}");
        }))
    }
}

/// `text` as one word for a POSIX shell: as it is when it has nothing special, else in
/// single quotes.
fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@%,=".contains(&b));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::fs;
    use std::path::Path;

    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    fn cli(line: &str) -> Result<String> {
        crate::run(&args(line))
    }

    /// A directory with v1.37.2 installed (stand-ins for the API server and etcd only).
    struct Installed(PathBuf);

    impl Installed {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "cargo-rudder-envtest-{name}-{}",
                std::process::id()
            ));
            let _ = fs::remove_dir_all(&dir);
            let release = dir.join("v1.37.2");
            fs::create_dir_all(&release).unwrap();
            for name in ["kube-apiserver", "etcd"] {
                let path = release.join(name);
                fs::write(&path, "#!/bin/sh\n").unwrap();
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
                }
            }
            Self(dir)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Installed {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn envtest_help_is_the_commands_help() {
        for line in ["rudder envtest --help", "envtest use --help", "envtest -h"] {
            assert!(
                matches!(cli(line), Ok(help) if help == crate::HELP),
                "{line:?}"
            );
        }
    }

    #[test]
    fn bad_envtest_arguments_are_refused_before_anything_is_downloaded() {
        for line in [
            "envtest",
            "envtest frob",
            "envtest use 1.37 1.36",
            "envtest use 1.x",
            "envtest use -p json",
            "envtest use -p",
            "envtest use --with kubelet",
            "envtest use --index-url",
            "envtest use -i",
            "envtest use --frobnicate",
            "envtest list 1.37",
            "envtest list -p env",
            "envtest list --with kwok",
            "envtest cleanup --offline",
            "envtest cleanup --index-url http://127.0.0.1:9/i.yaml",
        ] {
            let result = cli(line);
            assert!(
                matches!(result, Err(Error::Invalid(_) | Error::Envtest(_))),
                "{line:?}: {result:?}"
            );
        }
    }

    #[test]
    fn use_offline_prints_the_directory_or_the_variable() {
        let dir = Installed::new("use");
        let d = dir.path().display();
        let release = dir.path().join("v1.37.2");
        assert_eq!(
            cli(&format!("envtest use 1.37 --offline --with none --dir {d}")).unwrap(),
            release.display().to_string()
        );
        assert_eq!(
            cli(&format!(
                "envtest use --offline --with=none -p env --dir={d}"
            ))
            .unwrap(),
            format!("export RUDDER_ENVTEST_ASSETS={}", release.display())
        );
        // Offline, what is missing is an error naming it; nothing is downloaded.
        let err = cli(&format!("envtest use --offline --with kwok --dir {d}")).unwrap_err();
        assert!(
            err.to_string()
                .contains("an install there lacks kwok-stages.yaml, kwok"),
            "{err}"
        );
        let err = cli(&format!("envtest use 1.36 --offline --dir {d}")).unwrap_err();
        assert!(
            err.to_string().starts_with("1.36.x is not installed in"),
            "{err}"
        );
    }

    #[test]
    fn list_installed_and_cleanup_work_without_a_network() {
        let dir = Installed::new("list");
        let d = dir.path().display();
        let listed = cli(&format!("envtest list -i --dir {d}")).unwrap();
        assert_eq!(
            listed,
            format!(
                "v1.37.2  installed  {}",
                dir.path().join("v1.37.2").display()
            )
        );
        assert_eq!(
            cli(&format!("envtest cleanup 1.36 --dir {d}")).unwrap(),
            format!("nothing to remove: no install matches 1.36.x in {d}")
        );
        assert_eq!(
            cli(&format!("envtest cleanup --dir {d}")).unwrap(),
            format!("removed {}", dir.path().join("v1.37.2").display())
        );
        assert!(!dir.path().join("v1.37.2").exists());
        assert_eq!(
            cli(&format!("envtest list --installed --dir {d}")).unwrap(),
            format!("nothing installed in {d}")
        );
    }

    #[test]
    fn paths_are_quoted_for_the_shell_only_when_needed() {
        assert_eq!(
            shell_quote("/home/a/.cache/v1.37.2"),
            "/home/a/.cache/v1.37.2"
        );
        assert_eq!(shell_quote("/tmp/my dir"), "'/tmp/my dir'");
        assert_eq!(shell_quote("/tmp/it's"), r"'/tmp/it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
