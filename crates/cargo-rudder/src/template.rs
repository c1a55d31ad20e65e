//! Rendering templates into files: sections kept or dropped, every placeholder filled, the
//! files written, and the cargo commands a scaffold runs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::error::{Error, Result};

/// One file of a generated project or crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedFile {
    /// Its path, relative to the project's (or crate's) directory.
    pub path: PathBuf,
    /// Its contents.
    pub text: String,
}

impl GeneratedFile {
    /// A file at `path` holding `text`, which must have no `{{` placeholder left.
    pub(crate) fn new(path: impl Into<PathBuf>, text: String) -> Result<Self> {
        let path = path.into();
        if let Some(at) = text.find("{{") {
            return Err(Error::Placeholder {
                rest: text[at..].chars().take(60).collect(),
                path,
            });
        }
        Ok(Self { path, text })
    }
}

/// Keeps what `{{#NAME}}` ... `{{/NAME}}` (each on a line of its own) enclose when `NAME`
/// is on in `switches`, drops it otherwise; `{{^NAME}}` ... `{{/NAME}}` is the inverse, kept
/// only when `NAME` is off. The marker lines go either way. A switch not named in
/// `switches` is off.
pub(crate) fn sections(template: &str, switches: &[(&str, bool)]) -> String {
    let mut out = String::with_capacity(template.len());
    // The switch of each open section, innermost last.
    let mut open: Vec<bool> = Vec::new();
    for line in template.split_inclusive('\n') {
        let trimmed = line.trim();
        let marker = |prefix: &str| {
            trimmed
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix("}}"))
                .filter(|name| !name.contains(' '))
        };
        let on = |name: &str| switches.iter().any(|(n, on)| *n == name && *on);
        if let Some(name) = marker("{{#") {
            open.push(on(name));
        } else if let Some(name) = marker("{{^") {
            open.push(!on(name));
        } else if marker("{{/").is_some() {
            open.pop();
        } else if open.iter().all(|on| *on) {
            out.push_str(line);
        }
    }
    out
}

/// Writes `files` under `dir`, creating directories as needed.
pub(crate) fn write_all(dir: &Path, files: &[GeneratedFile]) -> Result<()> {
    for file in files {
        let target = dir.join(&file.path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
        }
        fs::write(&target, &file.text).map_err(|e| Error::io("write", &target, e))?;
    }
    Ok(())
}

/// `cargo` (the one that started this process, if any) run in `dir`.
pub(crate) fn cargo(dir: &Path) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(dir);
    cmd
}

/// Runs `cmd` with its output captured; fails with its stderr when it exits non-zero.
pub(crate) fn output(cmd: &mut Command) -> Result<Output> {
    let command = format!("{cmd:?}");
    let output = cmd.output().map_err(|e| Error::Command {
        command: command.clone(),
        detail: format!("cannot start it: {e}"),
    })?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(Error::Command {
            command,
            detail: format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_kept_or_dropped_with_their_markers() {
        let template = "a\n{{#webhook}}\nb\n  {{/webhook}}\nc\n";
        assert_eq!(sections(template, &[("webhook", true)]), "a\nb\nc\n");
        assert_eq!(sections(template, &[("webhook", false)]), "a\nc\n");
        assert_eq!(sections(template, &[]), "a\nc\n");
        let nested = "{{#a}}\n1\n{{#b}}\n2\n{{/b}}\n3\n{{/a}}\n";
        assert_eq!(sections(nested, &[("a", true), ("b", false)]), "1\n3\n");
        let inverted = "a\n{{^fleet}}\nb\n{{/fleet}}\n{{#fleet}}\nc\n{{/fleet}}\n";
        assert_eq!(sections(inverted, &[("fleet", false)]), "a\nb\n");
        assert_eq!(sections(inverted, &[]), "a\nb\n");
        assert_eq!(sections(inverted, &[("fleet", true)]), "a\nc\n");
    }

    #[test]
    fn a_placeholder_left_is_an_error() {
        assert!(GeneratedFile::new("x", "a {{b}} c".into()).is_err());
        assert!(GeneratedFile::new("x", "a {b} c".into()).is_ok());
    }
}
