//! The `nfguard` binary: thin wiring only. Each subcommand's flags and logic
//! live in its own module (`<module>::cli`); this file parses, sets up logging
//! and maps results to exit codes (0 ok, 1 policy denial, 2 error).

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
    /// Log filter (tracing EnvFilter syntax), e.g. "info,nfguard=debug" [default: warn].
    #[arg(long, global = true, env = "NFGUARD_LOG")]
    log: Option<String>,
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
    Check(nfguard::plugin::CheckArgs),
    /// Every node's netfilter profile, hazards, taints and writers, from the cluster.
    Status(nfguard::status::cli::Args),
    /// DaemonSet: probe this node and keep its NodeNetfilterProfile current.
    Reporter(nfguard::reporter::cli::Args),
    /// Deployment: conditions, labels, taints, writer inventory, clean-up.
    Controller(nfguard::controller::cli::Args),
    /// Deployment: the validating admission webhook.
    Webhook(Box<nfguard::webhook::cli::Args>),
    /// Print nfguard's CustomResourceDefinitions as YAML.
    Crd,
}

#[derive(Subcommand)]
enum Inspect {
    /// Which iptables an image bundles, read from its registry without running it.
    // Boxed: its registry flags make it much larger than the other variant.
    Image(Box<nfguard::registry::cli::Args>),
    /// This node's netfilter profile and hazards (current network namespace).
    Node(nfguard::node::cli::Args),
}

/// The log filter unless `--log` says: `status` and `check` print a failed
/// API call as their one-line error, so kube-client's own error log of the
/// same failure would only be a second, noisier line.
fn default_log_filter(command: &Command) -> &'static str {
    match command {
        Command::Status(_) | Command::Check(_) => "warn,kube_client=off",
        _ => "warn",
    }
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

/// Parse argv; installed as `kubectl-nfguard`, the CLI is kubectl's plugin.
fn parse(plugin: bool) -> Cli {
    let mut command = Cli::command();
    if plugin {
        command = nfguard::plugin::adapt_command(command);
    }
    Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    // The image parser child confines itself before anything else runs.
    if let Some(code) = nfguard::registry::parse::child::main_if_invoked() {
        return code;
    }
    // Before any thread: image inspection's freed buffers must not stay
    // resident in per-thread arenas (runtime/allocator.rs).
    let tuned = nfguard::runtime::allocator::return_large_frees_to_the_kernel();
    let plugin = nfguard::plugin::invoked_as_plugin(std::env::args_os().next().as_deref());
    let cli = parse(plugin);
    let filter = cli
        .log
        .clone()
        .unwrap_or_else(|| default_log_filter(&cli.command).to_string());
    init_logging(cli.log_format, &filter);
    tracing::debug!(
        mmap_threshold = tuned.then_some(nfguard::runtime::allocator::MMAP_THRESHOLD),
        "allocator"
    );
    // One rustls crypto provider (ring, the webhook server's) for the whole
    // process, before any TLS client exists.
    nfguard::runtime::client::install_crypto_provider();
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
            Command::Inspect(Inspect::Image(args)) => nfguard::registry::cli::run(*args).await,
            Command::Inspect(Inspect::Node(args)) => nfguard::node::cli::run(args).await,
            Command::Check(args) => nfguard::plugin::run_check(args, plugin).await,
            Command::Status(args) => nfguard::status::cli::run(args).await,
            Command::Reporter(args) => nfguard::reporter::cli::run(args).await,
            Command::Controller(args) => nfguard::controller::cli::run(args).await,
            Command::Webhook(args) => nfguard::webhook::cli::run(*args).await,
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
