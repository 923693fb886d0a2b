//! `nfguard check -f FILE... --profiles PATH [--nodes PATH] [--policy PATH]`
//! or with `--kubeconfig`/`--cluster` reading the facts from a live cluster.
//! Exit 0 allow/warn, 1 deny, 2 error (returned as Err to main).

use super::whatif::{self, patch};
use super::{Inputs, ResolveOptions, check, cluster, load, running};
use crate::compat::evaluate::DEFAULT_PLATFORM;
use crate::judgement::ImageLookup;
use crate::output::{Format, render_structured};
use crate::registry::cli::RegistryArgs;
use crate::registry::{DockerConfigFile, ImageInspector};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Manifest file(s): multi-document YAML or JSON; `-` reads stdin.
    #[arg(
        short = 'f',
        long = "filename",
        required_unless_present = "running",
        env = "NFGUARD_CHECK_FILES",
        value_delimiter = ','
    )]
    pub files: Vec<String>,
    /// NodeNetfilterProfile objects: a file or a directory of YAML/JSON files.
    #[arg(long, env = "NFGUARD_PROFILES")]
    pub profiles: Option<PathBuf>,
    /// Node objects (labels, taints) for candidate-node selection.
    #[arg(long, env = "NFGUARD_NODES")]
    pub nodes: Option<PathBuf>,
    /// NetfilterPolicy objects (default without any: action Deny, unresolvedImages Warn).
    #[arg(long, env = "NFGUARD_POLICY")]
    pub policy: Option<PathBuf>,
    #[command(flatten)]
    pub lookup: LookupArgs,
    /// Read profiles (and nodes, policies, namespaces unless given as files)
    /// from the cluster in this kubeconfig.
    #[arg(long, env = "NFGUARD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Read the facts from the cluster (in-cluster config or the default kubeconfig).
    #[arg(long, env = "NFGUARD_CLUSTER")]
    pub cluster: bool,
    /// Output format: text, json, yaml, or for CI junit (XML test report),
    /// github (Actions workflow commands), sarif (SARIF 2.1.0).
    #[arg(
        short = 'o',
        long,
        env = "NFGUARD_OUTPUT",
        value_enum,
        default_value = "text"
    )]
    pub output: CheckFormat,
    /// Node names listed per reason in text output.
    #[arg(long, env = "NFGUARD_MAX_NODES", default_value_t = 10)]
    pub max_nodes: usize,
    #[command(flatten)]
    pub what_if: WhatIfArgs,
}

/// How images are looked up (`check`, and `status` for its what-if).
#[derive(clap::Args, Debug, Clone)]
pub struct LookupArgs {
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Platform for nodes whose labels do not say (os/arch[/variant]).
    #[arg(long, env = "NFGUARD_PLATFORM_DEFAULT", default_value = DEFAULT_PLATFORM)]
    pub platform_default: String,
    /// Overall budget in seconds for image look-ups; the rest count as unresolved.
    #[arg(long, env = "NFGUARD_TIMEOUT", default_value_t = 30)]
    pub timeout: u64,
    /// Image look-ups in flight at once.
    #[arg(long, env = "NFGUARD_CONCURRENCY", default_value_t = 8)]
    pub concurrency: usize,
}

impl LookupArgs {
    pub fn default_platform(&self) -> anyhow::Result<crate::facts::Platform> {
        self.platform_default
            .parse()
            .map_err(|e| anyhow::anyhow!("--platform-default: {e}"))
    }

    /// Look-ups through `lookup`, or the registry inspector these flags
    /// configure, within `--timeout`. With `from_cluster` (images named by
    /// what runs in the cluster, i.e. by its tenants: `--running`,
    /// `status`) the egress policy is the in-cluster components': internal
    /// addresses are refused unless `--registry-allow-*` allows them, so a
    /// pod cannot make an operator's laptop or CI runner probe its network.
    pub fn options(
        &self,
        lookup: Option<Arc<dyn ImageLookup>>,
        from_cluster: bool,
    ) -> ResolveOptions {
        let timeout = Duration::from_secs(self.timeout.max(1));
        let registry = if from_cluster {
            self.registry.in_cluster_config(timeout)
        } else {
            self.registry.config(timeout)
        };
        let credentials = Arc::new(DockerConfigFile::for_config(&registry));
        ResolveOptions {
            lookup: lookup.unwrap_or_else(|| Arc::new(ImageInspector::new(registry))),
            credentials,
            timeout,
            concurrency: self.concurrency,
        }
    }
}

/// What runs today, and nodes changed as assumed (`docs/check.md#what-if`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct WhatIfArgs {
    /// Also judge what runs today (needs --cluster or --kubeconfig): every
    /// DaemonSet and running pod that can touch netfilter.
    #[arg(long, env = "NFGUARD_CHECK_RUNNING")]
    pub running: bool,
    #[command(flatten)]
    pub change: AssumeArgs,
}

/// The assumed node change (`check` and `status` take the same flags).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AssumeArgs {
    /// Label selector of the nodes --assume changes (kubectl syntax;
    /// default: every node).
    #[arg(long, env = "NFGUARD_ASSUME_NODES", requires = "assume")]
    pub assume_nodes: Option<String>,
    /// A change of the assumed nodes (repeatable): iptables=1.8.11[/nft|legacy],
    /// kubeProxyMode=iptables|nftables|ipvs, kernel.ipTables=absent|module|builtin|loaded,
    /// kernel.nfTables=..., os=debian-11|debian-12|debian-13.
    #[arg(long, env = "NFGUARD_ASSUME", value_delimiter = ',')]
    pub assume: Vec<String>,
}

impl AssumeArgs {
    /// The selector and the parsed patches; None without `--assume`. Bad
    /// input is refused here, before anything is read.
    pub fn parse(&self) -> Result<Option<(String, Vec<patch::Patch>)>, whatif::WhatIfError> {
        let patches = patch::parse_all(&self.assume)?;
        let selector = self.assume_nodes.clone().unwrap_or_default();
        whatif::selector::parse_label_selector(&selector)?;
        Ok((!patches.is_empty()).then_some((selector, patches)))
    }
}

/// `check`'s own formats: the shared ones plus those only a gate needs, so
/// other subcommands never accept `-o junit` and print something else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckFormat {
    Json,
    Yaml,
    #[default]
    Text,
    Junit,
    Github,
    Sarif,
}

impl From<Format> for CheckFormat {
    fn from(f: Format) -> Self {
        match f {
            Format::Json => CheckFormat::Json,
            Format::Yaml => CheckFormat::Yaml,
            Format::Text => CheckFormat::Text,
        }
    }
}

/// Injectable dependencies (tests pass a fake resolver or a mock client).
#[derive(Default)]
pub struct Env {
    pub lookup: Option<Arc<dyn ImageLookup>>,
    pub client: Option<kube::Client>,
}

impl Args {
    fn cluster_mode(&self) -> bool {
        self.cluster || self.kubeconfig.is_some()
    }
}

/// Load manifests and facts from files and/or the cluster.
pub async fn gather(args: &Args, client: Option<kube::Client>) -> anyhow::Result<Inputs> {
    gather_around(args, client, None).await
}

/// `gather`, with the cluster's profiles and nodes already `listed` (the
/// rest of the cluster's facts are read).
async fn gather_around(
    args: &Args,
    client: Option<kube::Client>,
    listed: Option<cluster::Listed>,
) -> anyhow::Result<Inputs> {
    let default_platform = args.lookup.default_platform()?;
    let cluster_mode = args.cluster_mode() || client.is_some();
    if args.what_if.running && !cluster_mode {
        anyhow::bail!("--running reads what runs in a cluster: add --cluster or --kubeconfig PATH");
    }
    let manifests = if args.files.is_empty() {
        load::Manifests::default()
    } else {
        load::load_manifests(&args.files)?
    };
    let mut inputs = Inputs {
        workloads: manifests.workloads,
        sources: manifests.sources,
        notes: manifests.notes,
        note_files: manifests.note_files,
        files: args.files.clone(),
        default_platform,
        ..Inputs::default()
    };
    if let Some(p) = &args.nodes {
        inputs.nodes = load::load_nodes(p)?;
    }
    if let Some(p) = &args.policy {
        inputs.policies = load::load_policies(p)?;
    }
    if let Some(p) = &args.profiles {
        inputs.profiles = load::load_profiles(p)?;
    }
    if cluster_mode {
        let client = match client {
            Some(c) => c,
            None => crate::runtime::client::client(args.kubeconfig.as_deref()).await?,
        };
        let facts = match listed {
            Some(listed) => {
                cluster::load_around(client.clone(), listed, args.policy.is_none()).await?
            }
            None => {
                cluster::load(client.clone(), args.nodes.is_none(), args.policy.is_none()).await?
            }
        };
        if args.profiles.is_none() {
            inputs.profiles = facts.profiles;
        }
        if args.nodes.is_none() {
            inputs.nodes = facts.nodes;
        }
        if args.policy.is_none() {
            inputs.policies = facts.policies;
        }
        inputs.namespace_labels = Some(facts.namespace_labels);
        if inputs.profiles.is_empty() {
            anyhow::bail!(
                "the cluster has no NodeNetfilterProfile (is nfguard's reporter running?)"
            );
        }
        if args.what_if.running {
            inputs.workloads.extend(running::load(&client).await?);
        }
    } else if args.profiles.is_none() {
        anyhow::bail!("no node profiles: pass --profiles PATH, or --kubeconfig PATH / --cluster");
    }
    Ok(inputs)
}

/// Gather, resolve, evaluate.
pub async fn execute(args: &Args, env: Env) -> anyhow::Result<super::Report> {
    // A bad patch is refused before anything is read.
    let change = args.what_if.change.parse()?;
    let inputs = gather(args, env.client).await?;
    let opts = args.lookup.options(env.lookup, args.what_if.running);
    Ok(match change {
        None => check(&inputs, &opts).await?,
        Some((selector, patches)) => {
            whatif::predict::predict(inputs, &selector, &patches, opts)
                .await?
                .assumed
        }
    })
}

/// What `check --cluster --running` with `change` predicts, both
/// judgements kept (`status`'s what-if section); None without `--assume`.
pub async fn predict_running(
    client: kube::Client,
    lookup: &LookupArgs,
    change: &AssumeArgs,
    image_lookup: Option<Arc<dyn ImageLookup>>,
    listed: Option<cluster::Listed>,
) -> anyhow::Result<Option<whatif::predict::Prediction>> {
    let Some((selector, patches)) = change.parse()? else {
        return Ok(None);
    };
    let args = Args {
        files: Vec::new(),
        profiles: None,
        nodes: None,
        policy: None,
        lookup: lookup.clone(),
        kubeconfig: None,
        cluster: true,
        output: CheckFormat::Json,
        max_nodes: 0,
        what_if: WhatIfArgs {
            running: true,
            change: change.clone(),
        },
    };
    let inputs = gather_around(&args, Some(client), listed).await?;
    let opts = lookup.options(image_lookup, true);
    Ok(Some(
        whatif::predict::predict(inputs, &selector, &patches, opts).await?,
    ))
}

/// The report in the requested format.
pub fn render(
    report: &super::Report,
    format: impl Into<CheckFormat>,
    max_nodes: usize,
) -> anyhow::Result<String> {
    let shared = match format.into() {
        CheckFormat::Json => Format::Json,
        CheckFormat::Yaml => Format::Yaml,
        CheckFormat::Text => Format::Text,
        CheckFormat::Junit => return Ok(super::junit::render(report, max_nodes)),
        // Workflow commands in a CI log: as read by people as the text.
        CheckFormat::Github => {
            return Ok(crate::output::terminal_safe(super::github::render(
                report, max_nodes,
            )));
        }
        CheckFormat::Sarif => return super::sarif::render(report, max_nodes),
    };
    Ok(match render_structured(report, shared)? {
        Some(s) => s,
        None => crate::output::terminal_safe(report.to_text(max_nodes)),
    })
}

pub async fn run(args: Args) -> anyhow::Result<u8> {
    run_with(args, Env::default()).await
}

/// `run` with injected dependencies (`kubectl nfguard check` passes the
/// client it built from `--context`).
pub async fn run_with(args: Args, env: Env) -> anyhow::Result<u8> {
    let report = execute(&args, env).await?;
    print!("{}", render(&report, args.output, args.max_nodes)?);
    Ok(report.exit_code())
}
