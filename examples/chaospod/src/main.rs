//! Run: `cargo run -p chaospod -- --crd | kubectl apply -f -`, then `cargo run -p chaospod`
//! (with a kubeconfig pointing at a cluster). `--help` lists the flags.
//!
//! The ChaosPod operator: the controller under a manager with leader election, `/healthz`
//! `/readyz` and `/metrics`, stopping on SIGINT or SIGTERM.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::net::SocketAddr;
use std::process::ExitCode;

use chaospod::Options;
use rudder::ErrorChain;
use rudder::lease::leader_election::LeaderElectionConfig;
use rudder::manifests::DeployOptions;
use rudder::webhook::manifest::ClientConfig;

const HELP: &str = "\
chaospod: runs Pods from ChaosPod resources and stops them on schedule

USAGE: chaospod [FLAGS]

  --crd                        print the ChaosPod CRD as YAML and exit
  --manifests                  print the CRD and the webhook configurations (multi-document
                               YAML for kubectl apply -f -) and exit; the webhooks are reached
                               through --webhook-service in --webhook-namespace
  --webhook-service NAME       the Service in front of the webhook server (default
                               chaospod-webhook)
  --webhook-namespace NS       its namespace (default chaospod-system)
  --webhook-cert-dir DIR       serve the defaulting and validating webhooks with tls.crt and
                               tls.key from DIR (reloaded when they change); without it (or
                               --webhook-self-signed), no webhook server runs
  --webhook-self-signed SECRET serve the webhooks with certificates the operator makes
                               itself: a CA and a serving certificate for --webhook-service,
                               kept in Secret SECRET in --webhook-namespace (created if
                               missing, shared by every replica, renewed before they expire),
                               and the CA injected into the webhook configurations (no
                               cert-manager needed). With --manifests, also prints the RBAC
                               this needs, bound to --service-account
  --service-account NAME       the operator's ServiceAccount in --webhook-namespace, for the
                               RBAC --manifests prints (default chaospod)
  --webhook-address ADDR       the webhook server's address (default 0.0.0.0:9443)
  --metrics-cert-dir DIR       serve /metrics over HTTPS with tls.crt and tls.key from DIR,
                               only to callers the API server authenticates (TokenReview) and
                               authorizes for get on /metrics (SubjectAccessReview)
  --metrics-self-signed        the same with the certificate of --webhook-self-signed, which
                               then also names --metrics-service. With --manifests, either
                               also prints the RBAC the reviews need
  --metrics-service NAME       the Service in front of the metrics server, in
                               --webhook-namespace (default chaospod-metrics)
  --namespace NS               watch only NS (default: all namespaces)
  --health-address ADDR        probe server address (default 0.0.0.0:8081; 'off' for none)
  --metrics-address ADDR       metrics server address (default 0.0.0.0:8080; 'off' for none)
  --leader-election-namespace NS
                               elect a leader through the Lease chaospod-leader in NS
                               (default: the client's namespace)
  --no-leader-election         run without leader election (one replica only)
  --deploy IMAGE               print every object needed to deploy the operator running IMAGE
                               as the other flags configure it (multi-document YAML for
                               kubectl apply -f -) and exit: the CRD, ServiceAccount
                               (--service-account), RBAC derived from the code, Deployment in
                               --webhook-namespace (its container gets the other flags), the
                               metrics Service (--metrics-service), a NetworkPolicy admitting
                               only the webhook and metrics ports, and with webhooks their
                               Service (--webhook-service) and configurations
  --help                       this text

The cluster comes from KUBECONFIG, ~/.kube/config or the in-cluster service account.";

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match parse(&args) {
        Ok(Some(parsed)) => parsed,
        Ok(None) => return ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("chaospod: {message}\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    match run(parsed).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("chaospod: {}", ErrorChain(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

struct Parsed {
    /// `--deploy`: the image, and the operator's own flags for its container.
    deploy: Option<Deploy>,
    options: Options,
    webhook_address: Option<SocketAddr>,
    election_namespace: Option<String>,
    election: bool,
}

struct Deploy {
    image: String,
    namespace: String,
    service_account: String,
    webhook_service: String,
    metrics_service: String,
    args: Vec<String>,
}

/// The flags that configure the operator: all but `--deploy IMAGE` and `--manifests`.
fn operator_args(all: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = all.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--deploy" => {
                args.next();
            }
            "--manifests" => {}
            _ => out.push(arg.clone()),
        }
    }
    out
}

fn parse(args: &[String]) -> Result<Option<Parsed>, String> {
    let all = args;
    let mut parsed = Parsed {
        deploy: None,
        options: Options::default(),
        webhook_address: None,
        election_namespace: None,
        election: true,
    };
    let mut manifests = false;
    let mut self_signed: Option<String> = None;
    let mut cert_dir = false;
    let mut service_account = "chaospod".to_owned();
    let mut metrics_cert_dir: Option<String> = None;
    let mut metrics_self_signed = false;
    let mut metrics_service = "chaospod-metrics".to_owned();
    let mut service = ("chaospod-webhook".to_owned(), "chaospod-system".to_owned());
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match arg.as_str() {
            "--help" | "-h" => {
                println!("{HELP}");
                return Ok(None);
            }
            "--crd" => {
                let yaml = chaospod::crd_yaml().map_err(|e| e.to_string())?;
                print!("{yaml}");
                return Ok(None);
            }
            "--manifests" => manifests = true,
            "--deploy" => {
                let image = value(arg)?;
                parsed.deploy = Some(Deploy {
                    image,
                    namespace: String::new(),
                    service_account: String::new(),
                    webhook_service: String::new(),
                    metrics_service: String::new(),
                    args: operator_args(all),
                });
            }
            "--webhook-service" => service.0 = value(arg)?,
            "--webhook-namespace" => service.1 = value(arg)?,
            "--webhook-self-signed" => self_signed = Some(value(arg)?),
            "--service-account" => service_account = value(arg)?,
            "--metrics-cert-dir" => metrics_cert_dir = Some(value(arg)?),
            "--metrics-self-signed" => metrics_self_signed = true,
            "--metrics-service" => metrics_service = value(arg)?,
            "--webhook-cert-dir" => {
                cert_dir = true;
                let dir = value(arg)?;
                let webhooks = parsed.options.webhooks.take().unwrap_or_default();
                parsed.options.webhooks = Some(webhooks.cert_dir(dir));
            }
            "--webhook-address" => {
                let addr = value(arg)?;
                let addr = addr
                    .parse()
                    .map_err(|e| format!("bad address {addr:?}: {e}"))?;
                parsed.webhook_address = Some(addr);
            }
            "--namespace" => parsed.options.namespace = Some(value(arg)?),
            "--health-address" => parsed.options.health_address = address(&value(arg)?)?,
            "--metrics-address" => parsed.options.metrics_address = address(&value(arg)?)?,
            "--leader-election-namespace" => parsed.election_namespace = Some(value(arg)?),
            "--no-leader-election" => parsed.election = false,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if metrics_self_signed && self_signed.is_none() {
        return Err("--metrics-self-signed needs --webhook-self-signed".to_owned());
    }
    if metrics_self_signed && metrics_cert_dir.is_some() {
        return Err("--metrics-self-signed and --metrics-cert-dir exclude each other".to_owned());
    }
    let secure_metrics = metrics_self_signed || metrics_cert_dir.is_some();
    if let Some(deploy) = &mut parsed.deploy {
        deploy.namespace = service.1.clone();
        deploy.service_account = service_account.clone();
        deploy.webhook_service = service.0.clone();
        deploy.metrics_service = metrics_service.clone();
        if parsed.election {
            let namespace = parsed
                .election_namespace
                .clone()
                .unwrap_or_else(|| service.1.clone());
            parsed.options.leader_election = Some(
                LeaderElectionConfig::new(namespace, "chaospod-leader")
                    .with_release_on_cancel(true),
            );
        }
    }
    if manifests && parsed.deploy.is_none() {
        let client = ClientConfig::service(&service.0, &service.1);
        let mut yaml = chaospod::manifests_yaml(&client).map_err(|e| e.to_string())?;
        if let Some(secret) = &self_signed {
            let rbac = chaospod::self_signed_rbac(&service.1, &service_account, secret);
            yaml.push_str(&rbac.to_yaml().map_err(|e| e.to_string())?);
        }
        if secure_metrics {
            let rbac = chaospod::secure_metrics_rbac(&service.1, &service_account);
            yaml.push_str(&rbac.to_yaml().map_err(|e| e.to_string())?);
        }
        print!("{yaml}");
        return Ok(None);
    }
    if let Some(secret) = self_signed {
        if cert_dir {
            return Err(
                "--webhook-self-signed and --webhook-cert-dir exclude each other".to_owned(),
            );
        }
        let mut certificates = chaospod::self_signed_certificates(&secret, &service.0, &service.1)
            .map_err(|e| e.to_string())?;
        if metrics_self_signed {
            let (name, ns) = (&metrics_service, &service.1);
            certificates = certificates.extra_names([
                name.clone(),
                format!("{name}.{ns}"),
                format!("{name}.{ns}.svc"),
                format!("{name}.{ns}.svc.cluster.local"),
            ]);
            parsed.options.secure_metrics = Some(rudder::manager::SecureMetrics::self_signed());
        }
        parsed.options.webhook_certificates = Some(certificates);
        let webhooks = parsed.options.webhooks.take().unwrap_or_default();
        parsed.options.webhooks = Some(webhooks);
    }
    if let Some(dir) = metrics_cert_dir {
        parsed.options.secure_metrics = Some(rudder::manager::SecureMetrics::files(dir));
    }
    match (parsed.webhook_address, parsed.options.webhooks.take()) {
        (Some(addr), Some(webhooks)) => parsed.options.webhooks = Some(webhooks.bind_address(addr)),
        (Some(_), None) => {
            return Err(
                "--webhook-address needs --webhook-cert-dir or --webhook-self-signed".to_owned(),
            );
        }
        (None, webhooks) => parsed.options.webhooks = webhooks,
    }
    Ok(Some(parsed))
}

fn address(value: &str) -> Result<Option<SocketAddr>, String> {
    if value == "off" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|e| format!("bad address {value:?}: {e}"))
}

async fn run(parsed: Parsed) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if let Some(deploy) = parsed.deploy {
        let options = DeployOptions::new(chaospod::CONTROLLER, deploy.namespace, deploy.image)
            .service_account(deploy.service_account)
            .webhook_service(deploy.webhook_service)
            .metrics_service(deploy.metrics_service)
            .args(deploy.args);
        let manifests = chaospod::deploy_manifests(parsed.options, options).await?;
        print!("{}", manifests.to_yaml()?);
        return Ok(());
    }
    let client = kube::Client::try_default().await?;
    let mut options = parsed.options;
    if parsed.election {
        let namespace = parsed
            .election_namespace
            .unwrap_or_else(|| client.default_namespace().to_owned());
        options.leader_election = Some(
            LeaderElectionConfig::new(namespace, "chaospod-leader").with_release_on_cancel(true),
        );
    }
    let manager = chaospod::manager(client, options).await?;
    eprintln!("chaospod: running; SIGINT or SIGTERM stops it");
    manager.start_until_signal().await?;
    Ok(())
}
