//! The performance lab: Rudder beside client-go, controller-runtime and Go's `net/http`, one
//! command per comparison. `cargo xtask bench-*` runs these (`cargo xtask help`); run
//! directly as `cargo run -p bench -- <command> [flags]`.
//!
//! A package of its own, beside `xtask/` rather than in it: the Go programs it embeds, the
//! wrk script, the answer decoding and the `/proc` readings are a laboratory, not the
//! contributor's everyday tooling, and they build only when a benchmark is asked for.

// A command-line tool reports to its terminal; printing is its job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod controller;
mod election;
mod failover;
mod go_bench;
mod informers;
mod report;
mod webhook;
mod workqueue;

use std::process::ExitCode;

use xtask::{envtest, go, util};

const HELP: &str = "\
cargo run -p bench -- <command> [flags]   (or cargo xtask bench-<command>)

Commands: workqueue, webhook, election, failover, informers, controller; `<command> --help` for its flags.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["workqueue", rest @ ..] => workqueue::run(rest),
        ["webhook", rest @ ..] => webhook::run(rest),
        ["election", rest @ ..] => election::run(rest),
        ["failover", rest @ ..] => failover::run(rest),
        ["informers", rest @ ..] => informers::run(rest),
        ["controller", rest @ ..] => controller::run(rest),
        [] | ["help" | "--help" | "-h"] => {
            println!("{HELP}");
            Ok(())
        }
        other => Err(format!("unknown command `{}`\n\n{HELP}", other.join(" "))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
