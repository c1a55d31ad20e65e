//! `cargo xtask checkov`: both examples' rendered deployment manifests through the `checkov`
//! scanner (installed into a virtualenv of its own when missing), failing on any finding
//! outside the accepted ones that docs/deploying-an-operator.md lists with their reasons.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use xtask::util::{cargo, run as sh, step, workspace_root};

/// The checkov release the manifests are checked with: a new one brings new checks, so it
/// moves on purpose, not with whatever PyPI has today.
pub(crate) const CHECKOV_VERSION: &str = "3.3.30";

/// The checks skipped for every object, each with the reason it is accepted. The deploying
/// guide lists the same; [`run_checkov`] fails when one is missing there. The ones in
/// [`TAG_ONLY`] are skipped only for an image given by tag: a rendering for an image by
/// digest is scanned with them on.
pub(crate) const ACCEPTED: &[(&str, &str)] = &[
    (
        "CKV_K8S_38",
        "the ServiceAccount token is mounted: the operator calls the API server with it",
    ),
    (
        "CKV_K8S_43",
        "the image is the user's input, here a tag; an image by digest passes",
    ),
    (
        "CKV_K8S_15",
        "the pull policy follows the image, the user's input; IfNotPresent suits a tag \
         that is never moved",
    ),
    (
        "CKV_K8S_11",
        "no CPU limit, by choice: CPU above the request is used only when the node has it \
         spare, and a limit throttles reconciles and webhook answers under load",
    ),
];

/// The accepted checks that an image by digest passes.
const TAG_ONLY: &[&str] = &["CKV_K8S_43", "CKV_K8S_15"];

/// The image the manifests are rendered for: a tag, as most deployments name one.
const IMAGE: &str = "registry.example.com/operator:0.1.0";

/// The same image by digest, for the one rendering that shows a digest passes [`TAG_ONLY`].
const IMAGE_BY_DIGEST: &str = "registry.example.com/operator@sha256:\
    4a8c1f0e2b3d5a6c7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d";

/// Each rendering checked: a file name, the example binary, its arguments.
const CASES: &[(&str, &str, &[&str])] = &[
    ("chaospod", "chaospod", &["--deploy", IMAGE]),
    (
        "chaospod-webhook-cert-dir",
        "chaospod",
        &["--deploy", IMAGE, "--webhook-cert-dir", "/certs"],
    ),
    (
        "chaospod-self-signed",
        "chaospod",
        &["--deploy", IMAGE, "--webhook-self-signed", "chaospod-certs"],
    ),
    (
        "chaospod-self-signed-metrics",
        "chaospod",
        &[
            "--deploy",
            IMAGE,
            "--webhook-self-signed",
            "chaospod-certs",
            "--metrics-self-signed",
        ],
    ),
    (
        "configmap-generator",
        "configmap-generator",
        &["--manifests", "--image", IMAGE],
    ),
    (
        "configmap-generator-leader-election",
        "configmap-generator",
        &[
            "--manifests",
            "--image",
            IMAGE,
            "--leader-election-namespace",
            "configmap-generator-system",
        ],
    ),
];

/// Installs checkov if needed, renders every case into a scratch directory and scans it with
/// the [`ACCEPTED`] checks skipped, then one rendering for an image by digest with only the
/// checks that are not about the image skipped; fails on any failed check or on a scan that
/// checked nothing. What CI calls.
pub(crate) fn run_checkov() -> Result<(), String> {
    let guide = workspace_root().join("docs/deploying-an-operator.md");
    let text = std::fs::read_to_string(&guide)
        .map_err(|e| format!("cannot read {}: {e}", guide.display()))?;
    let undocumented: Vec<&str> = ACCEPTED
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| !text.contains(id))
        .collect();
    if !undocumented.is_empty() {
        return Err(format!(
            "checks skipped without their reason in {}: {undocumented:?}",
            guide.display()
        ));
    }
    let checkov = step("checkov install", install)?;
    let scratch = std::env::temp_dir().join(format!("rudder-checkov-{}", std::process::id()));
    let (tagged, by_digest) = (scratch.join("tag"), scratch.join("digest"));
    let digest_case: &[(&str, &str, &[&str])] = &[(
        "chaospod-self-signed-metrics-digest",
        "chaospod",
        &[
            "--deploy",
            IMAGE_BY_DIGEST,
            "--webhook-self-signed",
            "chaospod-certs",
            "--metrics-self-signed",
        ],
    )];
    let all: Vec<&str> = ACCEPTED.iter().map(|(id, _)| *id).collect();
    let without_image: Vec<&str> = all
        .iter()
        .copied()
        .filter(|id| !TAG_ONLY.contains(id))
        .collect();
    let result = step("render the examples' manifests", || {
        let bin = build_examples()?;
        render(&bin, &tagged, CASES)?;
        render(&bin, &by_digest, digest_case)
    })
    .and_then(|()| step("checkov (images by tag)", || scan(&checkov, &tagged, &all)))
    .and_then(|()| {
        step("checkov (an image by digest)", || {
            scan(&checkov, &by_digest, &without_image)
        })
    });
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// The virtualenv checkov lives in: `RUDDER_CHECKOV_VENV`, or `checkov-venv` in the project's
/// cache ([`xtask::util::cache_base`]: `~/.cache/rudder/checkov-venv`), outside the checkout and
/// shared by its clones.
fn venv() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("RUDDER_CHECKOV_VENV") {
        return Ok(PathBuf::from(dir));
    }
    Ok(xtask::util::cache_base()?.join("checkov-venv"))
}

/// The checkov executable at [`CHECKOV_VERSION`], installed with pip into [`venv`] unless it
/// is there already.
fn install() -> Result<PathBuf, String> {
    let venv = venv()?;
    let checkov = venv.join("bin/checkov");
    if installed_version(&checkov).as_deref() == Some(CHECKOV_VERSION) {
        println!("  checkov {CHECKOV_VERSION} in {}", venv.display());
        return Ok(checkov);
    }
    let started = Instant::now();
    sh(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    sh(Command::new(venv.join("bin/pip")).args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        &format!("checkov=={CHECKOV_VERSION}"),
    ]))?;
    match installed_version(&checkov) {
        Some(version) if version == CHECKOV_VERSION => {
            println!(
                "  checkov {CHECKOV_VERSION} installed in {} ({:.0} s)",
                venv.display(),
                started.elapsed().as_secs_f64()
            );
            Ok(checkov)
        }
        other => Err(format!(
            "pip installed checkov, but {} reports version {other:?}",
            checkov.display()
        )),
    }
}

fn installed_version(checkov: &Path) -> Option<String> {
    let output = Command::new(checkov).arg("--version").output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Builds the example binaries once, so that every case is rendered by the same build.
fn build_examples() -> Result<PathBuf, String> {
    sh(cargo().args([
        "build",
        "--quiet",
        "-p",
        "chaospod",
        "--bin",
        "chaospod",
        "-p",
        "configmap-generator",
        "--bin",
        "configmap-generator",
    ]))?;
    Ok(crate::demo::target_dir()?.join("debug"))
}

/// Every case's manifests, as the example binary in `bin` prints them, in `dir/<case>.yaml`.
fn render(bin: &Path, dir: &Path, cases: &[(&str, &str, &[&str])]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (name, binary, args) in cases {
        let output = Command::new(bin.join(binary))
            .args(*args)
            .output()
            .map_err(|e| format!("cannot run {binary}: {e}"))?;
        let yaml = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() || !yaml.contains("kind: Deployment") {
            return Err(format!(
                "{binary} {} rendered no Deployment ({}): {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, yaml.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        println!("  {binary} {}: {}", args.join(" "), file.display());
    }
    Ok(())
}

/// Scans `dir` with the checks `skipped` off, and fails on any failed check, or when
/// nothing passed (nothing was read).
fn scan(checkov: &Path, dir: &Path, skipped: &[&str]) -> Result<(), String> {
    let output = Command::new(checkov)
        .arg("--directory")
        .arg(dir)
        .args([
            "--framework",
            "kubernetes",
            "--compact",
            "--quiet",
            "--skip-check",
        ])
        .arg(skipped.join(","))
        // Nothing fetched from the vendor's platform: the checks the release ships.
        .arg("--skip-download")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", checkov.display()))?;
    let report = String::from_utf8_lossy(&output.stdout);
    print!("{report}");
    let summary = Summary::parse(&report).ok_or_else(|| {
        format!(
            "no summary in checkov's report ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    println!(
        "  checkov: {} passed, {} failed, {} skipped ({} accepted: {})",
        summary.passed,
        summary.failed,
        summary.skipped,
        skipped.len(),
        skipped.join(", ")
    );
    if summary.failed > 0 || !output.status.success() {
        return Err(format!(
            "checkov found {} failed checks outside the accepted ones (see above); fix the \
             rendering, or accept a check with its reason in ACCEPTED and \
             docs/deploying-an-operator.md",
            summary.failed
        ));
    }
    if summary.passed == 0 {
        return Err("checkov passed no check: it read no manifest".to_owned());
    }
    Ok(())
}

/// The counts of checkov's report line `Passed checks: N, Failed checks: N, Skipped checks: N`.
#[derive(Debug, PartialEq, Eq)]
struct Summary {
    passed: u32,
    failed: u32,
    skipped: u32,
}

impl Summary {
    /// Sums every summary line of `report` (checkov prints one per framework scanned).
    fn parse(report: &str) -> Option<Summary> {
        let mut total: Option<Summary> = None;
        for line in report.lines() {
            let Some(rest) = line.trim().strip_prefix("Passed checks: ") else {
                continue;
            };
            let mut counts = rest.split(", ").map(|part| {
                part.rsplit(": ")
                    .next()
                    .and_then(|n| n.trim().parse::<u32>().ok())
            });
            let (Some(Some(passed)), Some(Some(failed)), Some(Some(skipped))) =
                (counts.next(), counts.next(), counts.next())
            else {
                return None;
            };
            let sum = total.get_or_insert(Summary {
                passed: 0,
                failed: 0,
                skipped: 0,
            });
            sum.passed += passed;
            sum.failed += failed;
            sum.skipped += skipped;
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_is_read_and_summed() {
        let report = "kubernetes scan results:\n\n\
            Passed checks: 107, Failed checks: 6, Skipped checks: 2\n\n\
            Check: CKV_K8S_13: \"Memory limits should be set\"\n\
            secrets scan results:\n\
            Passed checks: 1, Failed checks: 0, Skipped checks: 0\n";
        assert_eq!(
            Summary::parse(report),
            Some(Summary {
                passed: 108,
                failed: 6,
                skipped: 2
            })
        );
        assert_eq!(Summary::parse("no scan\n"), None);
        assert_eq!(Summary::parse("Passed checks: x, Failed checks: 1\n"), None);
    }

    #[test]
    fn every_case_names_its_file_once() {
        let mut names: Vec<&str> = CASES.iter().map(|(name, _, _)| *name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CASES.len());
    }
}
