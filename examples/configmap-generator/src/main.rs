//! The configmap-generator operator: `cargo run -p configmap-generator -- --help`.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use configmap_generator::Settings;
use rudder::manifests::DeployOptions;

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
    --leader-election-namespace NAMESPACE elect a leader through the Lease
                                          configmap-generator-leader there (default: none)
    --manifests                           print every object needed to run the operator as the
                                          other flags configure it (CRD, ServiceAccount, RBAC
                                          derived from the code, Deployment whose container gets
                                          those flags) as YAML for kubectl apply -f -, and exit
    --image IMAGE                         the Deployment's image (default:
                                          configmap-generator:latest)
    --operator-namespace NAMESPACE        where the operator runs (default:
                                          configmap-generator-system)
    --replicas N                          the Deployment's replicas (default: 1)
    -h, --help                            print this help and exit

The cluster is the one the current kubeconfig (or the in-cluster service account) names.
Logs (level info) go to stderr.";

/// What the command line asked for.
#[derive(Debug)]
enum Command {
    Help,
    Crd,
    Manifests(Options, Deploy),
    Run(Options),
}

type Options = Settings;

/// What `--manifests` needs besides the operator's own flags.
#[derive(Debug)]
struct Deploy {
    image: String,
    namespace: String,
    replicas: i32,
    /// The operator's flags, for the Deployment's container.
    args: Vec<String>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut options = Options::default();
    let mut manifests = false;
    let mut deploy = Deploy {
        image: "configmap-generator:latest".to_owned(),
        namespace: "configmap-generator-system".to_owned(),
        replicas: 1,
        args: Vec::new(),
    };
    while let Some(arg) = args.next() {
        let operator_flag = !matches!(
            arg.split('=').next(),
            Some("--manifests" | "--image" | "--operator-namespace" | "--replicas")
        );
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
        let mut taken = None;
        let mut value = |flag: &str| {
            let v = value(flag)?;
            taken = Some(v.clone());
            Ok::<_, String>(v)
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--crd" => return Ok(Command::Crd),
            "--manifests" => manifests = true,
            "--image" => deploy.image = value(&flag)?,
            "--operator-namespace" => deploy.namespace = value(&flag)?,
            "--replicas" => {
                let v = value(&flag)?;
                deploy.replicas = v
                    .parse()
                    .map_err(|e| format!("--replicas: {v:?} is not a number: {e}"))?;
            }
            "--name" => options.name = value(&flag)?,
            "--health-probe-bind-address" => options.health = address(&flag, &value(&flag)?)?,
            "--metrics-bind-address" => options.metrics = address(&flag, &value(&flag)?)?,
            "--namespace" => options.namespace = Some(value(&flag)?),
            "--leader-election-namespace" => {
                options.leader_election_namespace = Some(value(&flag)?);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
        if operator_flag {
            deploy.args.push(flag);
            if let Some(v) = taken {
                deploy.args.push(v);
            }
        }
    }
    if manifests {
        return Ok(Command::Manifests(options, deploy));
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

async fn run(options: Options) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let client = kube::Client::try_default().await?;
    let manager = configmap_generator::manager(client, &options, false).await?;
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
        Ok(Command::Manifests(options, deploy)) => {
            let rendered = configmap_generator::manifests(
                &options,
                DeployOptions::new("configmap-generator", deploy.namespace, deploy.image)
                    .replicas(deploy.replicas)
                    .args(deploy.args),
            )
            .await
            .and_then(|m| Ok(m.to_yaml()?));
            match rendered {
                Ok(yaml) => {
                    say(&mut std::io::stdout(), yaml.trim_end());
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    say(&mut std::io::stderr(), &format!("error: {error}"));
                    ExitCode::FAILURE
                }
            }
        }
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
    fn manifests_pass_the_operators_own_flags_to_the_deployment() {
        let Command::Manifests(o, d) = parse(args(
            "--manifests --namespace apps --image reg/op:1 --leader-election-namespace=ops --replicas 2",
        ))
        .unwrap() else {
            panic!("not manifests");
        };
        assert_eq!(o.namespace.as_deref(), Some("apps"));
        assert_eq!(o.leader_election_namespace.as_deref(), Some("ops"));
        assert_eq!(d.image, "reg/op:1");
        assert_eq!(d.replicas, 2);
        assert_eq!(
            d.args,
            ["--namespace", "apps", "--leader-election-namespace", "ops"]
        );
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
