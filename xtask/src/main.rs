//! `cargo xtask`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! Each task lives in its own module; `commands.rs` declares them all (names, arguments,
//! flags, help). Run `cargo xtask help` for the list.

// A command-line tool reports to its terminal; printing is its job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod checkov;
mod ci;
mod commands;
mod demo;
mod diagrams;
mod manifests;
mod mirror;
mod protobuf;
mod public_api;
mod scaffold;
mod tidy;
mod tools;

use std::process::ExitCode;
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match commands::dispatch(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
