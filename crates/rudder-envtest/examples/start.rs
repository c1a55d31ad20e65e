//! Starts a control plane, reports its version and how long the start took, and optionally
//! keeps it running for kubectl.
//!
//! ```text
//! cargo run -p rudder-envtest --example start                  # one start, then stop
//! cargo run -p rudder-envtest --example start -- --times 5     # measure five starts
//! cargo run -p rudder-envtest --example start -- --hold        # keep it up until Enter
//! cargo run -p rudder-envtest --example start -- --nodes 2     # with kube-scheduler and KWOK
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::Duration;

use rudder_envtest::TestEnv;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let hold = args.iter().any(|a| a == "--hold");
    let controller_manager = args.iter().any(|a| a == "--controller-manager");
    let nodes: usize = match args.iter().position(|a| a == "--nodes") {
        Some(i) => args.get(i + 1).ok_or("--nodes needs a number")?.parse()?,
        None => 0,
    };
    let times: usize = match args.iter().position(|a| a == "--times") {
        Some(i) => args.get(i + 1).ok_or("--times needs a number")?.parse()?,
        None => 1,
    };

    let mut took: Vec<Duration> = Vec::new();
    for _ in 0..times.max(1) {
        let env = TestEnv::builder()
            .controller_manager(controller_manager)
            .nodes(nodes)
            .start()
            .await?;
        let server = env.client()?.apiserver_version().await?;
        println!(
            "kube-apiserver {} ready in {:.2} s",
            server.git_version,
            env.started_in().as_secs_f64()
        );
        took.push(env.started_in());
        if hold {
            println!("KUBECONFIG={}", env.kubeconfig_path().display());
            println!("logs: {}", env.log_dir().display());
            println!("press Enter to stop");
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
        }
        env.stop()?;
    }
    if took.len() > 1 {
        took.sort();
        println!(
            "{} starts: min {:.2} s, median {:.2} s, max {:.2} s",
            took.len(),
            took[0].as_secs_f64(),
            took[took.len() / 2].as_secs_f64(),
            took[took.len() - 1].as_secs_f64()
        );
    }
    Ok(())
}
