//! Every `cargo xtask` command, declared once: its name, arguments, flags, help and
//! handler. The help text is generated from this table and each command's arguments are
//! parsed against it, so the two cannot drift; a test checks the README lists them all.

use std::collections::BTreeMap;

use cargo_rudder::OperatorOptions;

use crate::{checkov, ci, demo, diagrams, protobuf, public_api, scaffold, tidy, tools};
use xtask::util;

/// One command.
pub(crate) struct Command {
    /// What follows `cargo xtask`: `demo`, `envtest install`.
    pub(crate) name: &'static str,
    /// Its positional arguments, all required: `NAME`.
    args: &'static [&'static str],
    /// Its flags.
    flags: &'static [Flag],
    /// Whether `-- ARGS...` may follow, and what they are for.
    rest: Option<&'static str>,
    /// What it does, one paragraph.
    help: &'static str,
    /// Runs it with the parsed arguments.
    run: fn(&Parsed<'_>) -> Result<(), String>,
}

/// One flag of a command.
struct Flag {
    /// `--runs`.
    name: &'static str,
    /// The value's placeholder (`N`), or `None` for a switch.
    value: Option<&'static str>,
    /// What it does.
    help: &'static str,
}

const fn flag(name: &'static str, value: &'static str, help: &'static str) -> Flag {
    Flag {
        name,
        value: Some(value),
        help,
    }
}

const fn switch(name: &'static str, help: &'static str) -> Flag {
    Flag {
        name,
        value: None,
        help,
    }
}

const KIND: Flag = flag(
    "--kind",
    "KIND",
    "the custom resource's kind (default: the name in PascalCase)",
);
const GROUP: Flag = flag(
    "--group",
    "GROUP",
    "its API group (default: NAME.example.com)",
);

/// The commands, in the order the help lists them.
pub(crate) const COMMANDS: &[Command] = &[
    Command {
        name: "demo",
        args: &[],
        flags: &[
            flag(
                "--duration",
                "S",
                "how long to run, in seconds (default 30)",
            ),
            flag(
                "--kubeconfig",
                "PATH",
                "run on that cluster instead of a local control plane",
            ),
        ],
        rest: None,
        help: "the ChaosPod controller for S seconds on a local control plane (installed first \
               if needed) or on a cluster",
        run: |parsed| demo::run(parsed.given),
    },
    Command {
        name: "checkov",
        args: &[],
        flags: &[],
        rest: None,
        help: "both examples' rendered manifests through the checkov scanner (installed into \
               ~/.cache/rudder/checkov-venv if missing); fails on any finding but the accepted \
               ones (docs/deploying-an-operator.md)",
        run: |_| checkov::run_checkov(),
    },
    Command {
        name: "ci",
        args: &[],
        flags: &[],
        rest: Some("passed to cargo test"),
        help: "run everything CI runs: envtest install (Kubernetes 1.37.2 and 1.33.13), fmt \
               check, tidy, cargo deny, the book, clippy, docs, the public API files, cargo \
               package, checkov, the \
               Go module's checks, tests on both releases (a freshly scaffolded controller's \
               included), three scaffolded operators' tests (plain, with webhooks, \
               multi-cluster), a short demo",
        run: |parsed| ci::run_ci(&parsed.rest, &names()),
    },
    Command {
        name: "tidy",
        args: &[],
        flags: &[],
        rest: None,
        help: "check what a reader trusts and the compiler does not: every crate on \
               ARCHITECTURE.md's map, each lib.rs feature table against its Cargo.toml, every \
               command in the README, no import cycle between a crate's files, the diagrams \
               current, the book's relative links and anchors (run by ci)",
        run: |_| tidy::run(&[], &names()),
    },
    Command {
        name: "deny",
        args: &[],
        flags: &[],
        rest: None,
        help: "the dependency tree against deny.toml: cargo deny check licenses bans sources \
               (cargo-deny installed at a pinned version into ~/.cache/rudder/tools if \
               missing; advisories only in the GitHub workflow, which can fetch their database)",
        run: |_| tools::deny(),
    },
    Command {
        name: "book",
        args: &[],
        flags: &[],
        rest: None,
        help: "docs/ built as a book with mdBook (installed at a pinned version into \
               ~/.cache/rudder/tools if missing) into the target directory's book/; tidy \
               checks its links",
        run: |_| tools::book(),
    },
    Command {
        name: "diagrams",
        args: &[],
        flags: &[],
        rest: None,
        help: "regenerate docs/diagrams: the crate graph from the manifests, each .dot \
               rendered to .svg with Graphviz's dot",
        run: |_| diagrams::run(&[]),
    },
    Command {
        name: "protobuf",
        args: &[],
        flags: &[],
        rest: None,
        help: "regenerate crates/rudder-protobuf: schema.json from go/cmd/proto-schema (the Go \
               types' protobuf and JSON tags), then src/generated.rs from it and k8s-openapi's \
               source (tidy checks the Rust, ci the schema)",
        run: |_| protobuf::run(),
    },
    Command {
        name: "public-api",
        args: &[],
        flags: &[
            switch(
                "--check",
                "compare instead of writing: fail naming each crate whose surface is not its \
                 file, with the lines added and removed (run by ci)",
            ),
            switch(
                "--paths",
                "print, per crate, how many public paths reach each item that has more than one",
            ),
        ],
        rest: None,
        help: "write each publishable crate's public API to crates/<dir>/public-api.txt, one \
               line per public item and path, from rustdoc's JSON on nightly",
        run: |parsed| {
            public_api::run(match (parsed.is_set("--check"), parsed.is_set("--paths")) {
                (true, true) => return Err("--check and --paths: give one".into()),
                (true, false) => public_api::Mode::Check,
                (false, true) => public_api::Mode::Paths,
                (false, false) => public_api::Mode::Write,
            })
        },
    },
    Command {
        name: "new-controller",
        args: &["NAME"],
        flags: &[KIND, GROUP],
        rest: None,
        help: "scaffold a controller crate in examples/NAME (cargo-rudder's new-controller): a \
               custom resource, a reconciler, an operator binary and an envtest test",
        run: |parsed| {
            scaffold::new_controller(
                parsed.args[0],
                parsed.value("--kind"),
                parsed.value("--group"),
            )
        },
    },
    Command {
        name: "new-operator",
        args: &["PATH"],
        flags: &[
            KIND,
            GROUP,
            switch(
                "--webhook",
                "also a defaulting and a validating webhook, with certificates it makes itself",
            ),
            switch(
                "--multi-cluster",
                "its controller runs in each member cluster of a fleet (kubeconfig Secrets in \
                 the operator's --fleet-namespace, default its own) instead of its own \
                 cluster; not with --webhook",
            ),
        ],
        rest: None,
        help: "a standalone workspace at PATH for an operator of your own (cargo-rudder's new: \
               its crate, its xtask: test, manifests, run; a README; an envtest test), \
               depending on this Rudder checkout by path",
        run: |parsed| {
            scaffold::new_operator(
                parsed.args[0],
                OperatorOptions {
                    kind: parsed.value("--kind").map(str::to_owned),
                    group: parsed.value("--group").map(str::to_owned),
                    webhook: parsed.is_set("--webhook"),
                    multi_cluster: parsed.is_set("--multi-cluster"),
                    ..OperatorOptions::default()
                },
            )
        },
    },
    Command {
        name: "bench-workqueue",
        args: &[],
        flags: &[flag("--runs", "N", "how many sittings (default 1)")],
        rest: None,
        help: "Rudder's work queue against client-go's, controller-runtime's priority queue \
               (go/workqueue, with the machine's Go) and kube-runtime's, N times",
        run: |parsed| bench("workqueue", parsed.given),
    },
    Command {
        name: "bench-webhook",
        args: &[],
        flags: &[
            flag("--runs", "N", "how many sittings (default 1)"),
            flag("--duration", "S", "seconds under wrk per server and run"),
            flag("--connections", "C", "wrk's connections"),
            switch(
                "--callgrind",
                "instead: Rudder's instructions per request under callgrind",
            ),
        ],
        rest: None,
        help: "the webhook server against Go's net/http and controller-runtime's \
               (go/cmd/webhook-*) under wrk, side by side",
        run: |parsed| bench("webhook", parsed.given),
    },
    Command {
        name: "bench-failover",
        args: &[],
        flags: &[
            flag("--rounds", "N", "rounds per mode (default 5)"),
            flag("--objects", "N", "objects in the cache (default 5000)"),
        ],
        rest: None,
        help: "the old leader's release to the new leader's first reconcile with N objects in \
               the cache, warm standby off and on, on a local control plane",
        run: |parsed| bench("failover", parsed.given),
    },
    Command {
        name: "bench-informers",
        args: &[],
        flags: &[
            flag(
                "--kind",
                "KIND",
                "configmaps (one 400-byte value each) or pods (shaped like real ones, about 5 KB \
                 of JSON each) (default configmaps)",
            ),
            flag(
                "--objects",
                "N",
                "objects in the namespace (default 100000 ConfigMaps, 50000 Pods); several, \
                 comma-separated, sweep and redraw docs/informer-scaling.svg",
            ),
            flag("--runs", "N", "how many sittings (default 1)"),
            flag(
                "--settle",
                "S",
                "seconds after the sync before the steady reading (default 10)",
            ),
            switch(
                "--full",
                "every implementation: also Rudder's paginated lists, kube-runtime's streaming \
                 lists, client-go's informer (WatchListClient on and off, managedFields \
                 dropped, JSON) and Rudder's informer released by its last user",
            ),
            switch(
                "--callgrind",
                "instead of the table, Rudder's instructions per object synced under valgrind's \
                 callgrind, protobuf asked and JSON",
            ),
        ],
        rest: None,
        help: "informers at scale, each in its own process: Rudder's informer asking for \
               protobuf and for JSON, controller-runtime's cache and kube-runtime's reflector \
               (go/cmd/informer-rss for the Go side): sync time, CPU to sync and per object, \
               RSS before, peak, steady, bytes read, the API server's CPU over each sync, and \
               Rudder's ratios to controller-runtime beside issue 39's goals",
        run: |parsed| bench("informers", parsed.given),
    },
    Command {
        name: "bench-controller",
        args: &[],
        flags: &[
            flag(
                "--objects",
                "N",
                "ConfigMaps in the namespace (default 10000)",
            ),
            flag("--runs", "N", "runs per worker count (default 1)"),
        ],
        rest: None,
        help: "Rudder's controller against controller-runtime's manager and controller                (go/cmd/controller-pass), each in its own process: first pass, update to                reconcile p50/p99 idle and behind a backlog of every object, RSS, CPU; 1 and 4                workers",
        run: |parsed| bench("controller", parsed.given),
    },
    Command {
        name: "bench-election",
        args: &[],
        flags: &[
            flag("--rounds", "N", "rounds per elector (default 10)"),
            switch(
                "--scaled",
                "timings of 3 s / 2 s / 0.5 s instead of 15 s / 10 s / 2 s",
            ),
        ],
        rest: None,
        help: "a leader's release to the new leader holding the Lease: client-go's elector, \
               Rudder's polling only and with its watch",
        run: |parsed| bench("election", parsed.given),
    },
    Command {
        name: "envtest install",
        args: &[],
        flags: &[
            flag(
                "--version",
                "X.Y.Z",
                "the Kubernetes release (default 1.37.2)",
            ),
            switch(
                "--print-path",
                "only print the directory holding the binaries",
            ),
        ],
        rest: None,
        help: "build (Go modules) and cache the control plane rudder-envtest runs: Kubernetes, \
               etcd, KWOK (idempotent)",
        run: |parsed| {
            let args: Vec<&str> = ["install"]
                .into_iter()
                .chain(parsed.given.iter().copied())
                .collect();
            xtask::envtest::run(&args)
        },
    },
];

/// Every command's name, as the docs must give it (`envtest install`).
pub(crate) fn names() -> Vec<&'static str> {
    COMMANDS.iter().map(|c| c.name).collect()
}

/// Runs the bench package's `command`. A debug build: it only orchestrates, and each
/// benchmark builds what it measures in the profile it needs.
fn bench(command: &str, args: &[&str]) -> Result<(), String> {
    util::run(
        util::cargo()
            .args(["run", "--quiet", "--package", "bench", "--", command])
            .args(args),
    )
}

/// A command's arguments, checked against its declaration.
pub(crate) struct Parsed<'a> {
    /// The positional arguments, as many as declared.
    args: Vec<&'a str>,
    /// Each flag given, with its value (`None` for a switch).
    flags: BTreeMap<&'static str, Option<&'a str>>,
    /// What follows `--`.
    rest: Vec<&'a str>,
    /// Everything after the command's name, as given, for commands that hand their flags on.
    given: &'a [&'a str],
}

impl Parsed<'_> {
    fn value(&self, flag: &str) -> Option<&str> {
        self.flags.get(flag).copied().flatten()
    }

    fn is_set(&self, flag: &str) -> bool {
        self.flags.contains_key(flag)
    }
}

impl Command {
    /// `name ARGS [--flag VALUE]... [-- REST]`.
    fn usage(&self) -> String {
        let mut usage = self.name.to_owned();
        for arg in self.args {
            usage.push(' ');
            usage.push_str(arg);
        }
        for flag in self.flags {
            match flag.value {
                Some(value) => usage.push_str(&format!(" [{} {value}]", flag.name)),
                None => usage.push_str(&format!(" [{}]", flag.name)),
            }
        }
        if self.rest.is_some() {
            usage.push_str(" [-- ARGS]");
        }
        usage
    }

    /// `cargo xtask NAME --help`.
    pub(crate) fn help(&self) -> String {
        let mut out = format!("cargo xtask {}\n\n{}\n", self.usage(), wrap(self.help, 0));
        if !self.flags.is_empty() || self.rest.is_some() {
            out.push('\n');
        }
        for flag in self.flags {
            let name = match flag.value {
                Some(value) => format!("{} {value}", flag.name),
                None => flag.name.to_owned(),
            };
            out.push_str(&format!("  {name:<20}{}\n", flag.help));
        }
        if let Some(rest) = self.rest {
            out.push_str(&format!("  {:<20}{rest}\n", "-- ARGS"));
        }
        out
    }

    /// Checks `given` (what follows the command's name) against the declaration.
    fn parse<'a>(&self, given: &'a [&'a str]) -> Result<Parsed<'a>, String> {
        let mut parsed = Parsed {
            args: Vec::new(),
            flags: BTreeMap::new(),
            rest: Vec::new(),
            given,
        };
        let mut iter = given.iter();
        while let Some(&arg) = iter.next() {
            if arg == "--" && self.rest.is_some() {
                parsed.rest = iter.by_ref().copied().collect();
                break;
            }
            if arg.starts_with('-') {
                let flag = self.flags.iter().find(|f| f.name == arg).ok_or_else(|| {
                    let known: Vec<&str> = self.flags.iter().map(|f| f.name).collect();
                    if known.is_empty() {
                        format!("unknown flag {arg:?}: `{}` takes no flags", self.name)
                    } else {
                        format!(
                            "unknown flag {arg:?}: `{}` takes {}",
                            self.name,
                            known.join(", ")
                        )
                    }
                })?;
                let value = match flag.value {
                    Some(placeholder) => Some(
                        *iter
                            .next()
                            .ok_or_else(|| format!("{arg} needs a value ({placeholder})"))?,
                    ),
                    None => None,
                };
                parsed.flags.insert(flag.name, value);
            } else if parsed.args.len() < self.args.len() {
                parsed.args.push(arg);
            } else {
                return Err(format!("unexpected argument {arg:?} to `{}`", self.name));
            }
        }
        if let Some(missing) = self.args.get(parsed.args.len()) {
            return Err(format!("`{}` needs {missing}", self.name));
        }
        Ok(parsed)
    }
}

/// `cargo xtask help`.
pub(crate) fn help() -> String {
    let mut out =
        String::from("cargo xtask <task>   (cargo xtask <task> --help for its flags)\n\nTasks:\n");
    for command in COMMANDS {
        let usage = command.usage();
        let text = wrap(command.help, 26);
        // A short usage takes the first line of its help beside it.
        match text.get(26..) {
            Some(first) if usage.len() < 24 => out.push_str(&format!("  {usage:<24}{first}\n")),
            _ => out.push_str(&format!("  {usage}\n{text}\n")),
        }
    }
    out.push_str(&format!("  {:<24}this text\n", "help"));
    out
}

/// `text` wrapped at 92 columns, each line indented by `indent`.
fn wrap(text: &str, indent: usize) -> String {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > 92 {
            lines.push(format!("{:indent$}{line}", ""));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(format!("{:indent$}{line}", ""));
    }
    lines.join("\n")
}

/// Finds the command `args` name, parses the rest against it and runs it.
pub(crate) fn dispatch(args: &[&str]) -> Result<(), String> {
    if matches!(args, [] | ["help" | "--help" | "-h"]) {
        print!("{}", help());
        return Ok(());
    }
    // The longest name that prefixes the arguments: `envtest install` before `envtest`.
    let found = COMMANDS
        .iter()
        .filter_map(|command| {
            let words: Vec<&str> = command.name.split(' ').collect();
            args.starts_with(&words).then_some((command, words.len()))
        })
        .max_by_key(|(_, words)| *words);
    let Some((command, words)) = found else {
        return Err(format!("unknown task `{}`\n\n{}", args.join(" "), help()));
    };
    let given = &args[words..];
    if given
        .iter()
        .take_while(|a| **a != "--")
        .any(|a| matches!(*a, "--help" | "-h"))
    {
        print!("{}", command.help());
        return Ok(());
    }
    let parsed = command
        .parse(given)
        .map_err(|e| format!("{e}\n\n{}", command.help()))?;
    (command.run)(&parsed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn command(name: &str) -> &'static Command {
        COMMANDS.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn the_readme_lists_every_command() {
        let readme = std::fs::read_to_string(util::workspace_root().join("README.md")).unwrap();
        for command in COMMANDS {
            let row = format!("| `cargo xtask {}", command.name);
            assert!(
                readme.lines().any(|line| line.starts_with(&row)),
                "README.md's command table has no row starting {row:?}"
            );
        }
    }

    #[test]
    fn the_help_shows_every_command_and_flag() {
        let help = help();
        for command in COMMANDS {
            assert!(help.contains(&command.usage()), "{}", command.name);
            for flag in command.flags {
                assert!(command.help().contains(flag.name), "{}", flag.name);
            }
        }
        assert!(help.contains(
            "new-operator PATH [--kind KIND] [--group GROUP] [--webhook] [--multi-cluster]"
        ));
    }

    #[test]
    fn arguments_are_parsed_against_the_declaration() {
        let new = command("new-operator");
        let parsed = new.parse(&["op", "--webhook", "--kind", "Widget"]).unwrap();
        assert_eq!(parsed.args, ["op"]);
        assert_eq!(parsed.value("--kind"), Some("Widget"));
        assert!(parsed.is_set("--webhook"));
        assert!(!parsed.is_set("--group"));
        assert!(!parsed.is_set("--multi-cluster"));
        let fleet = new.parse(&["op", "--multi-cluster"]).unwrap();
        assert!(fleet.is_set("--multi-cluster") && !fleet.is_set("--webhook"));
        let unknown = new.parse(&["op", "--webhooks"]).err().unwrap();
        assert!(
            unknown.contains("--kind, --group, --webhook, --multi-cluster"),
            "{unknown}"
        );
        assert!(
            command("new-controller")
                .parse(&["c", "--multi-cluster"])
                .is_err()
        );
        assert!(new.parse(&[]).err().unwrap().contains("needs PATH"));
        assert!(new.parse(&["a", "b"]).is_err());
        assert!(
            new.parse(&["op", "--kind"])
                .err()
                .unwrap()
                .contains("needs a value")
        );
        assert!(
            command("checkov")
                .parse(&["--x"])
                .err()
                .unwrap()
                .contains("takes no flags")
        );
        let ci = command("ci").parse(&["--", "--release", "-q"]).unwrap();
        assert_eq!(ci.rest, ["--release", "-q"]);
        assert!(command("ci").parse(&["--release"]).is_err());
    }

    #[test]
    fn an_unknown_task_is_an_error() {
        assert!(dispatch(&["frobnicate"]).is_err());
        assert!(dispatch(&["envtest"]).is_err());
    }
}
