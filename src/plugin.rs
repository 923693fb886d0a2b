//! kubectl plugin mode. kubectl runs `kubectl nfguard ARGS` as
//! `kubectl-nfguard ARGS` (argv[0] = the plugin's path), so the same binary,
//! copied or linked under that name, answers as the plugin: its help names
//! `kubectl nfguard`, the in-cluster components are hidden from the help,
//! and `check` reads the cluster of the current context unless given
//! file-mode facts (`--profiles`).

use crate::check::cli::{Args as CheckCliArgs, Env, run, run_with};
use crate::runtime::client::connect;
use std::ffi::OsStr;
use std::path::Path;

/// The executable name kubectl looks for on PATH.
pub const PLUGIN_BINARY: &str = "kubectl-nfguard";
/// How users type it.
pub const PLUGIN_COMMAND: &str = "kubectl nfguard";
/// Subcommands that run inside the cluster, not from a user's kubectl.
const IN_CLUSTER_SUBCOMMANDS: [&str; 3] = ["reporter", "controller", "webhook"];

/// Whether argv[0] names the plugin executable (`kubectl-nfguard`, any
/// directory, `.exe` on Windows).
pub fn invoked_as_plugin(argv0: Option<&OsStr>) -> bool {
    let Some(name) = argv0
        .map(Path::new)
        .and_then(Path::file_name)
        .and_then(OsStr::to_str)
    else {
        return false;
    };
    name.strip_suffix(".exe").unwrap_or(name) == PLUGIN_BINARY
}

/// The CLI as kubectl's users see it.
pub fn adapt_command(mut cmd: clap::Command) -> clap::Command {
    for name in IN_CLUSTER_SUBCOMMANDS {
        if cmd.find_subcommand(name).is_some() {
            cmd = cmd.mut_subcommand(name, |c| c.hide(true));
        }
    }
    cmd.name(PLUGIN_BINARY)
        .bin_name(PLUGIN_COMMAND)
        .display_name(PLUGIN_COMMAND)
}

/// `check`'s flags plus kubectl's `--context`.
#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    #[command(flatten)]
    pub check: CheckCliArgs,
    /// Read the facts from the cluster of this kubeconfig context.
    #[arg(long, env = "NFGUARD_CONTEXT")]
    pub context: Option<String>,
}

impl CheckArgs {
    /// Whether the facts come from a cluster: asked for with `--cluster`,
    /// `--kubeconfig` or `--context`, or by default in plugin mode unless
    /// the profiles come from a file.
    pub fn reads_cluster(&self, plugin: bool) -> bool {
        self.check.cluster
            || self.check.kubeconfig.is_some()
            || self.context.is_some()
            || (plugin && self.check.profiles.is_none())
    }
}

/// `check` (plugin or not): cluster mode connects with the kubeconfig and
/// context given, file mode runs as before.
pub async fn run_check(args: CheckArgs, plugin: bool) -> anyhow::Result<u8> {
    if !args.reads_cluster(plugin) {
        return run(args.check).await;
    }
    let conn = connect(args.check.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let env = Env {
        client: Some(conn.client),
        ..Env::default()
    };
    run_with(args.check, env).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn plugin_name_is_recognised_in_any_directory() {
        for (argv0, want) in [
            ("/usr/local/bin/kubectl-nfguard", true),
            ("kubectl-nfguard", true),
            ("C:/bin/kubectl-nfguard.exe", true),
            ("/home/me/.krew/bin/kubectl-nfguard", true),
            ("target/release/nfguard", false),
            ("nfguard", false),
            ("/usr/bin/kubectl-nfguard-status", false),
            ("kubectl", false),
        ] {
            assert_eq!(invoked_as_plugin(Some(OsStr::new(argv0))), want, "{argv0}");
        }
        assert!(!invoked_as_plugin(None));
    }

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        args: CheckArgs,
    }

    fn parse(extra: &[&str]) -> CheckArgs {
        let argv = ["t", "-f", "x.yaml"].iter().chain(extra);
        T::try_parse_from(argv).expect("parses").args
    }

    #[test]
    fn plugin_check_reads_the_cluster_unless_profiles_come_from_a_file() {
        assert!(parse(&[]).reads_cluster(true));
        assert!(!parse(&["--profiles", "p.yaml"]).reads_cluster(true));
        // Outside plugin mode nothing changes: files unless asked.
        assert!(!parse(&[]).reads_cluster(false));
        assert!(parse(&["--cluster"]).reads_cluster(false));
        assert!(parse(&["--kubeconfig", "k"]).reads_cluster(false));
        // --context means a cluster, with or without --profiles.
        assert!(parse(&["--context", "prod"]).reads_cluster(false));
        assert!(parse(&["--profiles", "p.yaml", "--context", "prod"]).reads_cluster(true));
    }
}
