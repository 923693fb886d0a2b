//! `nfguard inspect image REF`: which iptables and nftables an image
//! bundles, read from its registry without running it.

use super::egress::{Cidr, Defaults, EgressPolicy, HostPattern};
use super::parse::{Parser, SandboxConfig};
use super::{
    CredentialSource, DockerConfigFile, ImageInspector, MemoryPlan, Platform, RegistryConfig,
    STALE_IF_ERROR,
};
use crate::facts::{Evidence, ImageProfile};
use crate::output::{Format, render_structured};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Image reference, e.g. `registry.example:5000/app:1.0` or `app@sha256:...`.
    #[arg(env = "NFGUARD_IMAGE")]
    pub image: String,
    /// Platform to pick from a multi-arch index (`os/arch[/variant]`); default: this machine's.
    #[arg(long, env = "NFGUARD_PLATFORM")]
    pub platform: Option<Platform>,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Seconds the whole inspection may take.
    #[arg(long, env = "NFGUARD_TIMEOUT", default_value_t = 30.0)]
    pub timeout: f64,
    /// Refuse a layer whose decompressed tar exceeds this many bytes.
    #[arg(long, env = "NFGUARD_MAX_LAYER_BYTES", default_value_t = 8 << 30)]
    pub max_layer_bytes: u64,
    /// Print what the inspection cost (layers read, bytes fetched) as one JSON line on stderr.
    #[arg(long, env = "NFGUARD_STATS")]
    pub stats: bool,
    #[arg(
        short = 'o',
        long,
        env = "NFGUARD_OUTPUT",
        value_enum,
        default_value = "text"
    )]
    pub output: Format,
}

fn render_text(p: &ImageProfile) -> String {
    let mut s = format!(
        "image:    {}\ndigest:   {}\nplatform: {}\n",
        p.image, p.digest, p.platform
    );
    let or_unknown = |o: Option<String>| o.unwrap_or_else(|| "unknown".into());
    match &p.iptables {
        None => s.push_str("iptables: none\n"),
        Some(f) => {
            s.push_str(&format!(
                "iptables: {} ({})\n",
                or_unknown(f.version.as_ref().map(|v| v.to_string())),
                or_unknown(f.backend.map(|b| b.to_string())),
            ));
            if let Some(pv) = &f.package_version {
                s.push_str(&format!("package:  {pv}\n"));
            }
            push_evidence(&mut s, &f.evidence, &f.conflicts);
        }
    }
    match &p.nftables {
        None => s.push_str("nftables: none\n"),
        Some(f) => {
            let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
            s.push_str(&format!(
                "nftables: {} (writes type userdata: {}; reader: {})\n",
                or_unknown(f.version.map(|v| v.to_string())),
                or_unknown(f.writes_type_userdata.map(yes_no)),
                or_unknown(f.userdata_reader.map(|r| r.to_string())),
            ));
            if let Some(pv) = &f.package_version {
                s.push_str(&format!("  package:  {pv}\n"));
            }
            s.push_str(if f.program {
                "  program:  nft\n"
            } else {
                "  program:  none (libnftables only)\n"
            });
            push_evidence(&mut s, &f.evidence, &f.conflicts);
        }
    }
    s
}

fn push_evidence(s: &mut String, evidence: &[Evidence], conflicts: &[String]) {
    for e in evidence {
        s.push_str(&format!(
            "  evidence: {} {} {}\n",
            serde_json::to_value(e.source)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            e.path,
            e.detail
        ));
    }
    for c in conflicts {
        s.push_str(&format!("  conflict: {c}\n"));
    }
}

/// Registry access flags shared by every command that inspects images.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RegistryArgs {
    /// A registry (`HOST:PORT`) spoken to over plain HTTP; repeatable or
    /// comma-separated.
    #[arg(
        long = "insecure-registry",
        env = "NFGUARD_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    pub insecure_registries: Vec<String>,
    /// docker config.json (or its directory) for credentials; default
    /// `$DOCKER_CONFIG/config.json`, then `~/.docker/config.json`.
    /// Credential helpers are not supported.
    #[arg(long, env = "NFGUARD_DOCKER_CONFIG")]
    pub docker_config: Option<PathBuf>,
    /// The memory limit image inspection is sized from, in bytes (the
    /// manifests pass the container's limit through the Downward API);
    /// default: this cgroup's limit, else 512 MiB. Three eighths of it is the
    /// budget for image data held at once (in-flight layers and caches).
    #[arg(long, env = "NFGUARD_MEMORY_LIMIT")]
    pub memory_limit: Option<u64>,
    /// Registry addresses (CIDR or IP) that may be contacted even where the
    /// default refuses them (the webhook and controller refuse loopback,
    /// link-local, unspecified, multicast); repeatable or comma-separated.
    #[arg(
        long = "registry-allow-cidr",
        env = "NFGUARD_REGISTRY_ALLOW_CIDRS",
        value_delimiter = ','
    )]
    pub allow_cidrs: Vec<Cidr>,
    /// Registry addresses (CIDR or IP) never contacted; wins over every allowance.
    #[arg(
        long = "registry-deny-cidr",
        env = "NFGUARD_REGISTRY_DENY_CIDRS",
        value_delimiter = ','
    )]
    pub deny_cidrs: Vec<Cidr>,
    /// Registry hosts (`name` or `*.domain`) that may be contacted at any address
    /// not denied by CIDR; repeatable or comma-separated.
    #[arg(
        long = "registry-allow-host",
        env = "NFGUARD_REGISTRY_ALLOW_HOSTS",
        value_delimiter = ','
    )]
    pub allow_hosts: Vec<HostPattern>,
    /// Registry hosts (`name` or `*.domain`) never contacted, also as redirect targets.
    #[arg(
        long = "registry-deny-host",
        env = "NFGUARD_REGISTRY_DENY_HOSTS",
        value_delimiter = ','
    )]
    pub deny_hosts: Vec<HostPattern>,
    /// PEM CA certificates trusted for registries besides the system's
    /// roots (a private registry's CA); read at start, at most 1 MiB each;
    /// repeatable or comma-separated.
    #[arg(
        long = "registry-ca",
        env = "NFGUARD_REGISTRY_CA_FILES",
        value_delimiter = ',',
        value_parser = CaBundle::read
    )]
    pub ca_files: Vec<CaBundle>,
    /// Seconds a tag's last answer stands in, past its pin's 30 s, while its
    /// registry gives no answer (unreachable, timed out, HTTP 429 or 5xx;
    /// never after a 401, 403 or 404); marked stale and counted. 0 turns it
    /// off. Default: 3600.
    #[arg(
        long = "registry-stale-if-error",
        env = "NFGUARD_REGISTRY_STALE_IF_ERROR"
    )]
    pub stale_if_error: Option<u64>,
    /// Where image layers are decompressed and parsed: `sandbox`, a child
    /// process per inspection that has no files, no network, no token or
    /// credentials, a seccomp filter and memory and CPU limits; or
    /// `in-process`, this process (only where seccomp is unavailable).
    #[arg(
        long = "image-parser",
        env = "NFGUARD_IMAGE_PARSER",
        value_enum,
        default_value = "sandbox"
    )]
    pub image_parser: ImageParser,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ImageParser {
    Sandbox,
    /// Also the default of `RegistryArgs::default()`: library callers and
    /// tests whose binary is not nfguard (the command line says `sandbox`).
    #[default]
    InProcess,
}

/// The binary that is running, as the kernel names it at exec time.
const THIS_BINARY: &str = "/proc/self/exe";

/// The certificates of one `--registry-ca` file, checked when read.
#[derive(Debug, Clone)]
pub struct CaBundle(Vec<u8>);

impl CaBundle {
    /// Larger than any real CA bundle (the system's whole store is ~200 KiB).
    pub const MAX_BYTES: u64 = 1 << 20;

    /// Read and check a PEM file: at most `MAX_BYTES`, at least one
    /// certificate, and every certificate one the TLS stack accepts.
    pub fn read(path: &str) -> Result<Self, String> {
        let pem = crate::capped::read_file_capped(std::path::Path::new(path), Self::MAX_BYTES)
            .map_err(|e| format!("cannot open {path}: {e}"))?
            .ok_or_else(|| format!("{path} is larger than {} bytes", Self::MAX_BYTES))?;
        let certs: Vec<_> = rustls_pemfile::certs(&mut &pem[..])
            .collect::<Result<_, _>>()
            .map_err(|_| format!("{path} is not a PEM certificate bundle"))?;
        if certs.is_empty() {
            return Err(format!("{path} holds no PEM certificate"));
        }
        // What the registry client does with them: a trust anchor each.
        let mut roots = rustls::RootCertStore::empty();
        for (i, cert) in certs.into_iter().enumerate() {
            roots
                .add(cert)
                .map_err(|_| format!("certificate {} of {path} is not a valid X.509 CA", i + 1))?;
        }
        Ok(CaBundle(pem))
    }
}

impl RegistryArgs {
    /// A registry configuration with these flags and `timeout` per
    /// inspection, for the CLI: only what the flags deny is refused.
    pub fn config(&self, timeout: Duration) -> RegistryConfig {
        self.config_with(timeout, Defaults::AllowAll)
    }

    /// The same for the in-cluster components (webhook, controller), which
    /// fetch what tenants name: internal addresses are refused unless allowed.
    pub fn in_cluster_config(&self, timeout: Duration) -> RegistryConfig {
        self.config_with(timeout, Defaults::RefuseInternal)
    }

    fn parser(&self, plan: &MemoryPlan) -> Parser {
        match self.image_parser {
            ImageParser::InProcess => Parser::InProcess,
            ImageParser::Sandbox => Parser::Sandbox(SandboxConfig {
                program: THIS_BINARY.into(),
                memory_bytes: plan.parser_memory_bytes(),
            }),
        }
    }

    fn config_with(&self, timeout: Duration, defaults: Defaults) -> RegistryConfig {
        let plan = MemoryPlan::detect(self.memory_limit);
        RegistryConfig {
            insecure_registries: self.insecure_registries.clone(),
            docker_config: self.docker_config.clone(),
            timeout,
            egress: EgressPolicy {
                defaults,
                allow_cidrs: self.allow_cidrs.clone(),
                deny_cidrs: self.deny_cidrs.clone(),
                allow_hosts: self.allow_hosts.clone(),
                deny_hosts: self.deny_hosts.clone(),
            },
            extra_root_certificates_pem: self.ca_files.iter().fold(Vec::new(), |mut all, b| {
                all.extend_from_slice(&b.0);
                all.push(b'\n');
                all
            }),
            stale_if_error: self
                .stale_if_error
                .map_or(STALE_IF_ERROR, Duration::from_secs),
            parser: self.parser(&plan),
            ..RegistryConfig::default()
        }
        .with_memory(plan)
    }
}

pub async fn run(args: Args) -> anyhow::Result<u8> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        anyhow::bail!("--timeout must be a positive number of seconds");
    }
    let config = RegistryConfig {
        max_decompressed_layer_bytes: args.max_layer_bytes,
        ..args.registry.config(Duration::from_secs_f64(args.timeout))
    };
    let platform = args.platform.unwrap_or_else(Platform::host);
    let credentials = DockerConfigFile::for_config(&config).for_image(&args.image)?;
    let inspector = ImageInspector::new(config);
    let (profile, stats) = inspector
        .inspect_with_stats(&args.image, &platform, credentials.as_ref())
        .await?;
    if args.stats {
        eprintln!("{}", serde_json::to_string(&stats)?);
    }
    match render_structured(&profile, args.output)? {
        Some(s) => print!("{s}"),
        None => print!("{}", render_text(&profile)),
    }
    Ok(0)
}
