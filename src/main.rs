//! The `nfguard` binary: thin wiring only. Each subcommand's flags and logic
//! live in its own module (`<module>::cli`); this file parses, sets up logging
//! and maps results to exit codes (0 ok, 1 policy denial, 2 error).

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "nfguard",
    version,
    about = "Stops iptables version and backend mismatches from breaking Kubernetes networking"
)]
struct Cli {
    /// Log format.
    #[arg(
        long,
        global = true,
        env = "NFGUARD_LOG_FORMAT",
        value_enum,
        default_value = "plain"
    )]
    log_format: LogFormat,
    /// Log filter (tracing EnvFilter syntax), e.g. "info,nfguard=debug".
    #[arg(long, global = true, env = "NFGUARD_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Plain,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect an image or this node.
    #[command(subcommand)]
    Inspect(Inspect),
    /// Policy gate: would these manifests be safe on these nodes?
    Check(nfguard::check::cli::Args),
    /// DaemonSet: probe this node and keep its NodeNetfilterProfile current.
    Reporter(nfguard::reporter::cli::Args),
    /// Deployment: conditions, labels, taints, writer inventory, clean-up.
    Controller(nfguard::controller::cli::Args),
    /// Deployment: the validating admission webhook.
    Webhook(nfguard::webhook::cli::Args),
    /// Print nfguard's CustomResourceDefinitions as YAML.
    Crd,
}

#[derive(Subcommand)]
enum Inspect {
    /// Which iptables an image bundles, read from its registry without running it.
    Image(nfguard::registry::cli::Args),
    /// This node's netfilter profile and hazards (current network namespace).
    Node(nfguard::node::cli::Args),
}

fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| "warn".into());
    // Colours only on a terminal: `kubectl logs` shows escape codes verbatim.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.log);
    // kube-client and reqwest enable rustls with different crypto backends
    // (ring and aws-lc-rs), so rustls cannot choose one by itself and the
    // first TLS client (every in-cluster kube client) would panic. Name ring,
    // the one the webhook's server already uses, for the whole process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nfguard: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Inspect(Inspect::Image(args)) => nfguard::registry::cli::run(args).await,
            Command::Inspect(Inspect::Node(args)) => nfguard::node::cli::run(args).await,
            Command::Check(args) => nfguard::check::cli::run(args).await,
            Command::Reporter(args) => nfguard::reporter::cli::run(args).await,
            Command::Controller(args) => nfguard::controller::cli::run(args).await,
            Command::Webhook(args) => nfguard::webhook::cli::run(args).await,
            Command::Crd => {
                print!("{}", nfguard::api::crds_yaml());
                Ok(0)
            }
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // One line: the cause chain joined, as the CLI contract promises.
            eprintln!("nfguard: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::from(2)
        }
    }
}
