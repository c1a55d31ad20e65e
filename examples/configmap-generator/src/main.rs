//! The configmap-generator operator: `cargo run -p configmap-generator -- --help`.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use rudder::Manager;
use rudder::manager::{DEFAULT_HEALTH_ADDRESS, DEFAULT_METRICS_ADDRESS};

const USAGE: &str = "\
configmap-generator: an operator generating ConfigMaps from ConfigMapGenerator resources

USAGE:
    configmap-generator [OPTIONS]

OPTIONS:
    --crd                                 print the CRD as YAML and exit
                                          (install it: configmap-generator --crd | kubectl apply -f -)
    --name NAME                           the manager's name (default: configmap-generator)
    --health-probe-bind-address ADDR|off  where /healthz and /readyz listen (default: 0.0.0.0:8081)
    --metrics-bind-address ADDR|off       where /metrics listens (default: 0.0.0.0:8080)
    --namespace NAMESPACE                 watch only this namespace (default: all)
    -h, --help                            print this help and exit

The cluster is the one the current kubeconfig (or the in-cluster service account) names.
Logs (level info) go to stderr.";

/// What the command line asked for.
#[derive(Debug)]
enum Command {
    Help,
    Crd,
    Run(Options),
}

#[derive(Debug)]
struct Options {
    name: String,
    health: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    namespace: Option<String>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut options = Options {
        name: "configmap-generator".to_owned(),
        health: Some(DEFAULT_HEALTH_ADDRESS),
        metrics: Some(DEFAULT_METRICS_ADDRESS),
        namespace: None,
    };
    while let Some(arg) = args.next() {
        // Both `--flag value` and `--flag=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg, None),
        };
        let mut value = |flag: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--crd" => return Ok(Command::Crd),
            "--name" => options.name = value(&flag)?,
            "--health-probe-bind-address" => options.health = address(&flag, &value(&flag)?)?,
            "--metrics-bind-address" => options.metrics = address(&flag, &value(&flag)?)?,
            "--namespace" => options.namespace = Some(value(&flag)?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Command::Run(options))
}

/// An address, or `None` for `off` / `0` (controller-runtime's way of turning a server off).
fn address(flag: &str, value: &str) -> Result<Option<SocketAddr>, String> {
    if value == "off" || value == "0" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|e| format!("{flag}: {value:?} is not an address like 0.0.0.0:8080: {e}"))
}

async fn run(options: Options) -> Result<(), Box<dyn std::error::Error>> {
    let client = kube::Client::try_default().await?;
    let mut builder = Manager::builder(client)
        .name(options.name)
        .health_probe_address(options.health)
        .metrics_address(options.metrics);
    if let Some(namespace) = options.namespace {
        builder = builder.cache(move |cache| cache.default_namespace(namespace));
    }
    let manager = builder.build()?;
    configmap_generator::register(&manager).await?;
    tracing::info!("configmap-generator started; stop with Ctrl-C");
    manager.start_until_signal().await?;
    Ok(())
}

/// Writes `text` and a newline to stdout or stderr; a closed pipe is not worth a panic.
fn say(to: &mut dyn Write, text: &str) {
    let _ = writeln!(to, "{text}");
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO)
        .init();
    match parse(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            say(&mut std::io::stdout(), USAGE);
            ExitCode::SUCCESS
        }
        Ok(Command::Crd) => match configmap_generator::crd_yaml() {
            Ok(yaml) => {
                say(&mut std::io::stdout(), yaml.trim_end());
                ExitCode::SUCCESS
            }
            Err(error) => {
                say(&mut std::io::stderr(), &format!("error: {error}"));
                ExitCode::FAILURE
            }
        },
        Ok(Command::Run(options)) => match run(options).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                let mut text = format!("error: {error}");
                let mut source = error.source();
                while let Some(cause) = source {
                    // Some errors already print their source; say each cause once.
                    let cause_text = cause.to_string();
                    if !text.contains(&cause_text) {
                        text.push_str(&format!("\n  caused by: {cause_text}"));
                    }
                    source = cause.source();
                }
                say(&mut std::io::stderr(), &text);
                ExitCode::FAILURE
            }
        },
        Err(message) => {
            say(
                &mut std::io::stderr(),
                &format!("error: {message}\n\nRun with --help for usage."),
            );
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn args(line: &str) -> impl Iterator<Item = String> {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn flags_take_a_separate_or_inline_value() {
        let Command::Run(o) = parse(args(
            "--name n --metrics-bind-address=127.0.0.1:9000 --health-probe-bind-address off",
        ))
        .unwrap() else {
            panic!("not a run");
        };
        assert_eq!(o.name, "n");
        assert_eq!(o.metrics, Some("127.0.0.1:9000".parse().unwrap()));
        assert_eq!(o.health, None);
        assert_eq!(o.namespace, None);
    }

    #[test]
    fn help_crd_and_mistakes() {
        assert!(matches!(parse(args("--help")), Ok(Command::Help)));
        assert!(matches!(parse(args("--crd")), Ok(Command::Crd)));
        assert!(parse(args("--bogus")).is_err());
        assert!(parse(args("--name")).is_err());
        assert!(parse(args("--metrics-bind-address nowhere")).is_err());
    }
}
