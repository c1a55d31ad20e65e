//! The Rust tools CI runs that are not part of the toolchain, each from crates.io at a pinned
//! version, installed with `cargo install --locked` into the project's cache
//! (`~/.cache/rudder/tools/bin`, [`xtask::util::cache_base`]) when missing, found there at once
//! when present; and the two checks that use them: `cargo xtask deny` (the dependency tree
//! against `deny.toml`) and `cargo xtask book` (`docs/` built as a book with mdBook).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use xtask::util::{cargo, run as sh, workspace_root};

/// A crates.io package providing one binary, at the version CI runs. A new release brings new
/// checks or a new book layout, so each moves on purpose, not with whatever crates.io has today.
pub(crate) struct CargoTool {
    /// The package `cargo install` takes.
    pub(crate) package: &'static str,
    /// The exact version.
    pub(crate) version: &'static str,
    /// The binary it installs.
    pub(crate) binary: &'static str,
    /// More arguments to `cargo install` (features: only what CI runs is built).
    pub(crate) install_args: &'static [&'static str],
}

/// cargo-deny: licenses, bans (duplicate versions), sources and advisories of the tree.
/// A cold install (empty target directory) took 761 s on 2 shared cores at a load average of
/// 12-14, other builds beside it (2026-12-06); a second run finds it in under a second.
pub(crate) const CARGO_DENY: CargoTool = CargoTool {
    package: "cargo-deny",
    version: "0.20.2",
    binary: "cargo-deny",
    install_args: &[],
};

/// mdBook: `docs/` as a book, built without its `serve` and `watch` features (a web server and
/// a file watcher CI never runs): a cold install took 144 s at a load average of about 3
/// beside CI (839 s with the default features at 12-14, 2026-12-06); the book then builds in
/// about a second.
pub(crate) const MDBOOK: CargoTool = CargoTool {
    package: "mdbook",
    version: "0.5.4",
    binary: "mdbook",
    install_args: &["--no-default-features", "--features", "search"],
};

impl CargoTool {
    /// The tool's executable at its pinned version, installed into `~/.cache/rudder/tools`
    /// unless it is there already. `cargo install` builds in `CARGO_TARGET_DIR` when set (CI's
    /// own), else in a temporary directory it removes.
    pub(crate) fn install(&self) -> Result<PathBuf, String> {
        let root = xtask::util::cache_base()?.join("tools");
        let bin = root.join("bin").join(self.binary);
        if self.is_installed(&bin) {
            println!("  {} {} in {}", self.package, self.version, bin.display());
            return Ok(bin);
        }
        let started = Instant::now();
        sh(cargo()
            .args(["install", "--locked", "--force", "--version", self.version])
            .args(self.install_args)
            .arg("--root")
            .arg(&root)
            .arg(self.package))?;
        if !self.is_installed(&bin) {
            return Err(format!(
                "cargo install {} {} finished, but {} does not report that version",
                self.package,
                self.version,
                bin.display()
            ));
        }
        println!(
            "  {} {} installed in {} ({:.0} s)",
            self.package,
            self.version,
            bin.display(),
            started.elapsed().as_secs_f64()
        );
        Ok(bin)
    }

    /// Whether `bin --version` names [`Self::version`] (`cargo-deny 0.20.2`, `mdbook v0.5.4`).
    fn is_installed(&self, bin: &Path) -> bool {
        let Ok(output) = Command::new(bin).arg("--version").output() else {
            return false;
        };
        output.status.success()
            && names_version(&String::from_utf8_lossy(&output.stdout), self.version)
    }
}

/// Whether a `--version` line names `version` as a word of its own (with or without a `v`).
fn names_version(line: &str, version: &str) -> bool {
    line.split_whitespace()
        .any(|word| word.strip_prefix('v').unwrap_or(word) == version)
}

/// `cargo deny check licenses bans sources` against `deny.toml`, cargo-deny installed first if
/// missing. Advisories are left out: their database is fetched from GitHub, which the
/// project's machines cannot reach; the GitHub workflow checks them (see `deny.toml`).
pub(crate) fn deny() -> Result<(), String> {
    let bin = CARGO_DENY.install()?;
    let root = workspace_root();
    sh(Command::new(bin)
        .current_dir(&root)
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .args(["check", "licenses", "bans", "sources"]))
}

/// `docs/` built as a book (`docs/book.toml`, `docs/SUMMARY.md`) into `<target dir>/book`,
/// mdBook installed first if missing. Its local links are `cargo xtask tidy`'s to check.
pub(crate) fn book() -> Result<(), String> {
    let bin = MDBOOK.install()?;
    let dest = crate::demo::target_dir()?.join("book");
    sh(Command::new(bin)
        .arg("build")
        .arg(workspace_root().join("docs"))
        .arg("--dest-dir")
        .arg(&dest))?;
    println!("  the book: {}", dest.join("index.html").display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_line_names_the_pinned_version_only_as_a_whole_word() {
        assert!(names_version("cargo-deny 0.20.2\n", "0.20.2"));
        assert!(names_version("mdbook v0.5.4\n", "0.5.4"));
        assert!(!names_version("mdbook v0.5.40\n", "0.5.4"));
        assert!(!names_version("cargo-deny 0.20.1\n", "0.20.2"));
        assert!(!names_version("", "0.20.2"));
    }
}
