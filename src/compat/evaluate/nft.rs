//! The nft side of the decision table (docs/nft-skew.md): a container that
//! shares the node's netns brings a libnftables that writes the node's sets
//! and reads them back. libnftables >= 1.1.2 writes set userdata that an
//! unfixed older reader segfaults on; an unfixed reader segfaults on what
//! newer writers left. Findings name the other party; the messages live
//! here beside the rules that make them.

use super::ReasonCode;
use super::finding::{Acc, Ctx, Finding, Other, warning};
use super::nodeview::{NftParty, NodeView, Party};
use crate::facts::{NftVersion, NftablesFacts, Platform, UserdataReader};
use crate::node::nft_skew::crashes;

/// Judge one host-sharing container's libnftables on one node.
#[allow(clippy::too_many_arguments)]
pub(super) fn judge<'a>(
    ctx: &Ctx<'_>,
    index: usize,
    nft: &'a NftablesFacts,
    digest: &'a str,
    nv: &NodeView<'a>,
    platform: &'a Platform,
    node: Option<&'a str>,
    acc: &mut Acc<'a>,
) {
    let base = |mut f: Finding<'a>| {
        f.container = Some(index);
        f.platform = Some(platform);
        f.image_digest = Some(digest);
        f.image_nft = nft.release();
        f
    };
    // A writer of the new userdata, where an unfixed old reader lives. A
    // writer pod's reader runs on its own (kube-proxy's sync, a CNI's), and
    // so does a host kube-proxy's in nftables mode: critical. Otherwise the
    // host's own nft crashes only when something on the host lists the sets
    // (an operator, firewalld, nftables.service): a warning.
    if nft.writes_type_userdata == Some(true)
        && let Some(reader) = nv.nft.crashing_reader
    {
        let f = match reader.party {
            Party::Host if !reader.kube_proxy => warning(ReasonCode::NftNewWriterOldReader),
            _ => ctx.critical(ReasonCode::NftNewWriterOldReader),
        };
        let mut f = base(f);
        f.other = Some(Other::Nft(reader));
        acc.push(f, node);
    }
    // An unfixed reader, where sets it cannot read live or will be written.
    let live = nv
        .nft
        .live
        .filter(|l| crashes(nft, l.min_reader, l.fixed_required) == Some(true));
    let writer = nv
        .nft
        .new_writer
        .filter(|_| nft.userdata_reader == Some(UserdataReader::Crashes));
    if live.is_some() || writer.is_some() {
        let mut f = base(ctx.critical(ReasonCode::NftOldReaderNewSets));
        f.nft_live = live;
        f.other = writer.map(Other::Nft);
        acc.push(f, node);
    }
}

fn opt(v: Option<NftVersion>) -> String {
    v.map_or_else(|| "of an unknown release".into(), |v| v.to_string())
}

/// Who an nft party is, in a message.
pub(super) fn party(p: &NftParty<'_>) -> String {
    match p.party {
        Party::Host if p.kube_proxy => format!(
            "kube-proxy (nftables mode, on the host) through the host's nft {}",
            opt(p.version)
        ),
        Party::Host => format!("the host's own nft {}", opt(p.version)),
        Party::Pod {
            pod,
            container,
            image,
        } => format!(
            "writer container {container} ({image}, e.g. pod {pod}) with nft {}",
            opt(p.version)
        ),
        Party::Summary => "a writer pod".into(),
    }
}

const FIXED: &str = "libnftables >= 1.1.4, or a build with the fix (1.0.6.1, Kubernetes' \
                     1.0.6-2.1+k8s1, RHEL 9's 1.0.9-7.el9; docs/nft-skew.md)";

/// The message and remedy of the nft reason codes; None for any other code.
pub(super) fn message(f: &Finding<'_>) -> Option<(String, Option<String>)> {
    let image = opt(f.image_nft);
    let other = match f.other {
        Some(Other::Nft(p)) => Some(party(&p)),
        _ => None,
    };
    Some(match f.code {
        ReasonCode::NftNewWriterOldReader => {
            let other = other.unwrap_or_else(|| "an nft reader on the node".into());
            (
                format!(
                    "libnftables {image} in the image writes set userdata (a \"key typeof\" record \
                     on every `type` set and map) that {other} cannot parse: every command of it \
                     that lists the sets segfaults, kube-proxy's sync batches included, and the \
                     node's Services stop"
                ),
                Some(format!(
                    "upgrade that reader to {FIXED}; or use an image with libnftables < 1.1.2 or \
                     with the fix on both sides; or keep this workload off these nodes"
                )),
            )
        }
        ReasonCode::NftOldReaderNewSets => {
            let why = match (f.nft_live, &other) {
                (Some(l), _) => format!(
                    "the node's live sets ({} of them, e.g. {}) need {}",
                    l.count,
                    l.example,
                    match (l.fixed_required, l.min_reader) {
                        (false, Some(m)) => format!("an unfixed reader >= {m}"),
                        _ => "a reader with the fix".into(),
                    }
                ),
                (None, Some(o)) => format!("{o} writes set userdata it cannot parse"),
                (None, None) => "newer writers' set userdata".into(),
            };
            (
                format!(
                    "nft {image} in the image is unfixed and segfaults on set userdata it cannot \
                     parse: {why}; every command of it that lists the sets (nft list ruleset, nft -f \
                     batches) crashes"
                ),
                Some(format!(
                    "use an image with {FIXED}; or delete the sets (or keep their writers off the \
                     node)"
                )),
            )
        }
        _ => return None,
    })
}
