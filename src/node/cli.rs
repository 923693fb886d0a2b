//! `nfguard inspect node`: probe the current network namespace (and the
//! node's root filesystem for the host's own iptables) and print the facts
//! and hazards, or a complete NodeNetfilterProfile with `--as-profile`.

use crate::api::{NodeNetfilterProfile, NodeNetfilterProfileSpec};
use crate::output::{Format, render_structured};
use crate::runtime::clock::{Clock, SystemClock, rfc3339};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The node's root filesystem, where the host's iptables is installed.
    #[arg(long, env = "NFGUARD_HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// The host's libnftables carries the fix for set userdata it cannot
    /// parse (nftables be737a1986bf), although its release says otherwise: a
    /// vendor backport nfguard does not know (docs/nft-skew.md).
    #[arg(long, env = "NFGUARD_HOST_NFT_FIXED", default_value_t = false)]
    pub host_nft_fixed: bool,
    /// Output format. With --as-profile, text means YAML.
    #[arg(
        short = 'o',
        long = "output",
        env = "NFGUARD_OUTPUT",
        value_enum,
        default_value = "text"
    )]
    pub output: Format,
    /// Print a complete NodeNetfilterProfile object for this node name
    /// (readable later by `nfguard check --profiles`).
    #[arg(long, env = "NFGUARD_AS_PROFILE", value_name = "NODE_NAME")]
    pub as_profile: Option<String>,
}

pub async fn run(args: Args) -> anyhow::Result<u8> {
    let mut cfg = super::ProbeConfig::new(args.host_root.clone());
    cfg.host_nft_fixed = args.host_nft_fixed;
    let mut status = tokio::task::spawn_blocking(move || super::probe(&cfg)).await?;
    status.last_probe_time = Some(rfc3339(SystemClock.now()));
    let out = match args.as_profile {
        Some(node) => {
            let mut profile = NodeNetfilterProfile::new(
                &node,
                NodeNetfilterProfileSpec {
                    node_name: Some(node.clone()),
                },
            );
            profile.status = Some(status);
            let format = if args.output == Format::Text {
                Format::Yaml
            } else {
                args.output
            };
            render_structured(&profile, format)?.unwrap_or_default()
        }
        None => match render_structured(&status, args.output)? {
            Some(s) => s,
            None => super::text::render(&status),
        },
    };
    print!("{out}");
    Ok(0)
}
