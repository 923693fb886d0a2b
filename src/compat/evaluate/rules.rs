//! The decision table (shared doc §2), applied per (container, node) and
//! per pod, with findings aggregated over identical nodes.
//!
//! Reasoning is about the oldest reader against the newest writer of each
//! rule set, not about two version strings:
//! - the node's nft rules are written by the host's tools and by every writer
//!   pod (`status.writers`), and the live rules need `minReaderVersion`;
//! - an image's iptables is both a reader (save/restore of what is there) and
//!   a writer (what it adds is read by everyone else).

use super::candidate::Candidate;
use super::finding::{Acc, Ctx, Finding, LINEAR_MAX, Other, info, warning};
use super::images::ImageResolution;
use super::nodeview::{NodeState, NodeView, Party, RulesBackend, Versioned, node_state};
use super::policy::EffectivePolicy;
use super::render;
use super::workload::Scope;
use super::{Bounds, Decision, Listed, Reason, ReasonClass, ReasonCode, SubjectInput, Verdict};
use crate::api::UnresolvedAction;
use crate::facts::version::{FIRST_NATIVE_WRITER, is_known_bad};
use crate::facts::{Backend, IptablesFacts, Platform, Severity};
use foldhash::HashMap;

/// Each node class's candidates: (position among the candidates, name).
type Members<'a> = Vec<Vec<(u32, &'a str)>>;

/// The judgement was stopped (see [`Bounds::stop`]).
pub(super) struct Stopped;

/// One in-scope container's image on one node's platform.
#[derive(Clone, Copy)]
struct Judged<'a> {
    index: usize,
    scope: Scope,
    facts: &'a IptablesFacts,
    /// The digest the facts were read from, reported with every finding.
    digest: &'a str,
}

/// The decision, listing at most `bounds.max_reasons` reasons; None when
/// `bounds.stop` stopped it.
pub(super) fn evaluate(input: &SubjectInput<'_>, bounds: Bounds<'_>) -> Option<Listed> {
    let policy = input.policy;
    let containers = input.containers;
    let ctx = Ctx {
        action: policy.action,
        unresolved: policy.unresolved_images,
        containers,
    };
    let mut acc = Acc::new();
    let mut members = Members::new();
    let candidates = input.candidates;
    let mut in_scope = 0;

    let exempt_reason = policy.honoured_exemption(input.exempt_reason);
    if !policy.applies() {
        acc.push(info(ReasonCode::NamespaceNotSelected), None);
    } else if let Some(reason) = exempt_reason {
        let mut f = info(ReasonCode::Exempt);
        f.detail = Some(reason);
        acc.push(f, None);
    } else {
        if input.exempt_reason.is_some() {
            // Said first: the user asked for an exemption that does not count here.
            let mut f = info(ReasonCode::ExemptionNotAllowed);
            f.detail = Some(policy.namespace());
            acc.push(f, None);
        }
        let mut judged: Vec<(usize, &str)> = Vec::new();
        for (i, c) in containers.iter().enumerate() {
            match c.scope {
                Scope::HostReadOnly => {
                    let mut f = info(ReasonCode::HostNetworkWithoutNetAdmin);
                    f.container = Some(i);
                    acc.push(f, None);
                }
                Scope::None => {}
                Scope::HostShared | Scope::PodNetns => {
                    let image = c.image.as_deref().unwrap_or("");
                    if let Some(pattern) = policy.exempt_image_pattern(image) {
                        let mut f = info(ReasonCode::ImageExempt);
                        f.container = Some(i);
                        f.detail = Some(pattern);
                        acc.push(f, None);
                    } else {
                        judged.push((i, image));
                    }
                }
            }
        }
        in_scope = judged.len();
        if !judged.is_empty() {
            if candidates.is_empty() {
                acc.push(warning(ReasonCode::NoCandidateNodes), None);
            }
            members = judge_nodes(input, &ctx, &judged, &mut acc, bounds.stop).ok()?;
        }
    }

    // Invalid policies meant to judge this workload: said where they matter
    // (a container that can write rules, no exempt annotation).
    let writes_rules = containers
        .iter()
        .any(|c| matches!(c.scope, Scope::HostShared | Scope::PodNetns));
    if writes_rules && exempt_reason.is_none() {
        for ignored in policy.ignored() {
            let mut f = warning(ReasonCode::InvalidPolicyIgnored);
            f.detail = Some(ignored.message());
            acc.push(f, None);
        }
    }

    // The verdict counts every finding, rendered or not.
    let verdict = acc
        .groups
        .iter()
        .map(|(f, _)| f.effect)
        .max()
        .unwrap_or(Verdict::Allow);
    let shown: Vec<usize> = (0..acc.groups.len())
        .filter(|&g| acc.groups[g].0.severity >= input.min_severity)
        .collect();
    let listed = listed(&acc.groups, &shown, bounds.max_reasons);
    let reasons: Vec<Reason> = listed
        .iter()
        .map(|&g| {
            let (f, classes) = &acc.groups[g];
            render::reason(f, nodes_of(classes, &members), containers)
        })
        .collect();
    Some(Listed {
        decision: Decision {
            verdict,
            reasons,
            candidate_nodes: candidates.len(),
            containers_in_scope: in_scope,
            exemptions_allowed: policy.allows_exemptions(),
        },
        unlisted: shown.len() - listed.len(),
    })
}

/// The decision on a workload whose judgement did not finish (`detail`:
/// what and within which budget). Not knowing is the situation of an image
/// not inspected in time, so `unresolvedImages` decides: Deny denies; Warn
/// and Allow admit with a warning, since nothing at all was checked. Where
/// no policy selects the namespace it is admitted with the warning.
pub fn unfinished(policy: &EffectivePolicy, detail: &str) -> Decision {
    let deny = policy.applies() && policy.unresolved_images == UnresolvedAction::Deny;
    let effect = if deny { Verdict::Deny } else { Verdict::Warn };
    let mut f = Finding::new(ReasonCode::JudgementTimedOut, Severity::Warning, effect);
    f.detail = Some(detail);
    Decision {
        verdict: effect,
        reasons: vec![render::reason(&f, Vec::new(), &[])],
        candidate_nodes: 0,
        containers_in_scope: 0,
        exemptions_allowed: policy.allows_exemptions(),
    }
}

/// The groups of `shown` (in order) to list: all of them up to `max`; past
/// it the `max` that matter most to the verdict and the person reading it
/// (denying, then warning or an exemption, then the rest), in order.
fn listed(groups: &[(Finding<'_>, Vec<u32>)], shown: &[usize], max: usize) -> Vec<usize> {
    if shown.len() <= max {
        return shown.to_vec();
    }
    let weight = |g: usize| {
        let f = &groups[g].0;
        match f.effect {
            Verdict::Deny => 2,
            Verdict::Warn => 1,
            Verdict::Allow => u8::from(f.code.meta().class == ReasonClass::Exemption),
        }
    };
    let mut by_weight = shown.to_vec();
    // Stable: the first of equal weight stay.
    by_weight.sort_by_key(|&g| std::cmp::Reverse(weight(g)));
    by_weight.truncate(max);
    by_weight.sort_unstable();
    by_weight
}

/// The nodes a finding holds on, in candidate order (repeats kept): the
/// members of its classes.
fn nodes_of<'a>(classes: &[u32], members: &Members<'a>) -> Vec<&'a str> {
    match classes {
        [] => Vec::new(),
        [c] => members[*c as usize].iter().map(|(_, n)| *n).collect(),
        _ => {
            let mut all: Vec<(u32, &str)> = classes
                .iter()
                .flat_map(|c| members[*c as usize].iter().copied())
                .collect();
            // Stable: a node listed twice stays twice, side by side.
            all.sort_by_key(|(pos, _)| *pos);
            all.into_iter().map(|(_, n)| n).collect()
        }
    }
}

/// Everything about a candidate that decides its findings, its name aside:
/// candidates of one class get the same findings, in the same order.
#[derive(Clone, PartialEq, Eq, Hash)]
struct NodeClass<'a> {
    platform: &'a Platform,
    node: NodeState<'a>,
}

/// The classes seen so far, and each one's candidates.
struct Classes<'a> {
    /// Empty while `list` is short (see [`LINEAR_MAX`]).
    index: HashMap<NodeClass<'a>, usize>,
    list: Vec<NodeClass<'a>>,
    members: Members<'a>,
}

impl<'a> Classes<'a> {
    fn find(&self, c: &NodeClass<'a>) -> Option<usize> {
        if self.list.len() <= LINEAR_MAX {
            self.list.iter().position(|k| k == c)
        } else {
            self.index.get(c).copied()
        }
    }

    /// A candidate of class `c`: it holds the findings of its class's first.
    fn join(&mut self, c: usize, pos: usize, name: &'a str) {
        self.members[c].push((pos as u32, name));
    }

    /// A new class, whose first candidate's findings are `groups`; its index.
    fn add(&mut self, class: NodeClass<'a>, groups: &[usize], acc: &mut Acc<'a>) -> usize {
        let c = self.list.len();
        for &g in groups {
            acc.groups[g].1.push(c as u32);
        }
        self.list.push(class);
        self.members.push(Vec::new());
        if self.list.len() > LINEAR_MAX {
            if self.index.is_empty() {
                let all = self.list.iter().enumerate();
                self.index.extend(all.map(|(i, k)| (k.clone(), i)));
            } else {
                self.index.insert(self.list[c].clone(), c);
            }
        }
        c
    }
}

/// Judges each distinct node class once; a candidate only joins its class,
/// whose findings it holds. Same output as judging every candidate, since
/// findings depend on the class alone, in time linear in the candidates
/// (not in candidates x findings). `stop` is asked before each class is
/// judged (the step that costs containers x findings).
fn judge_nodes<'a>(
    input: &SubjectInput<'a>,
    ctx: &Ctx<'_>,
    judged: &[(usize, &'a str)],
    acc: &mut Acc<'a>,
    stop: &dyn Fn() -> bool,
) -> Result<Members<'a>, Stopped> {
    let any_host = judged
        .iter()
        .any(|(i, _)| ctx.containers[*i].scope == Scope::HostShared);
    // Per container: platform -> resolution, filled lazily (few platforms).
    let mut cache: Vec<Vec<(&'a Platform, Option<&'a ImageResolution>)>> =
        vec![Vec::new(); judged.len()];
    let mut classes = Classes {
        index: HashMap::default(),
        list: Vec::new(),
        members: Members::new(),
    };

    // A scene's NodeIndex names each candidate's class already: class id
    // -> position in `classes.list`, without building and hashing its view.
    let mut indexed: Vec<Option<usize>> = Vec::new();
    for (pos, cand) in input.candidates.iter().enumerate() {
        let id = cand.class.map(|c| c as usize);
        if let Some(c) = id.and_then(|id| indexed.get(id).copied().flatten()) {
            classes.join(c, pos, cand.name);
            continue;
        }
        let class = NodeClass {
            platform: platform_of(cand),
            node: node_state(cand.profile),
        };
        let c = match classes.find(&class) {
            Some(c) => c,
            None => {
                if stop() {
                    return Err(Stopped);
                }
                acc.trace.clear();
                judge_node(
                    input, ctx, judged, any_host, &mut cache, &class, cand.name, acc,
                );
                let groups = std::mem::take(&mut acc.trace);
                classes.add(class, &groups, acc)
            }
        };
        classes.join(c, pos, cand.name);
        if let Some(id) = id {
            if indexed.len() <= id {
                indexed.resize(id + 1, None);
            }
            indexed[id] = Some(c);
        }
    }
    Ok(classes.members)
}

/// All findings for one candidate.
#[allow(clippy::too_many_arguments)]
fn judge_node<'a>(
    input: &SubjectInput<'a>,
    ctx: &Ctx<'_>,
    judged: &[(usize, &'a str)],
    any_host: bool,
    cache: &mut [Vec<(&'a Platform, Option<&'a ImageResolution>)>],
    class: &NodeClass<'a>,
    name: &'a str,
    acc: &mut Acc<'a>,
) {
    let node = Some(name);
    let platform = class.platform;
    let nv = match &class.node {
        NodeState::Missing => {
            if any_host {
                acc.push(ctx.unknown(ReasonCode::NodeProfileMissing), node);
            }
            None
        }
        NodeState::Incomplete(probe_error) => {
            if any_host {
                let mut f = ctx.unknown(ReasonCode::NodeProfileIncomplete);
                f.detail = *probe_error;
                acc.push(f, node);
            }
            None
        }
        NodeState::Known(v) => Some(v),
    };
    if any_host && let Some(nv) = nv {
        for h in &nv.critical_hazards {
            let mut f = info(ReasonCode::NodeHazard);
            f.hazard = Some(*h);
            acc.push(f, node);
        }
    }

    let mut facts: Vec<Judged<'a>> = Vec::with_capacity(judged.len());
    for (slot, (i, image)) in judged.iter().enumerate() {
        let res = match cache[slot].iter().find(|(p, _)| *p == platform) {
            Some((_, r)) => *r,
            None => {
                let r = input.images.get(image, platform);
                cache[slot].push((platform, r));
                r
            }
        };
        if let (Some(ImageResolution::Resolved(profile)), Some(nv)) = (res, nv)
            && ctx.containers[*i].scope == Scope::HostShared
            && let Some(n) = &profile.nftables
        {
            // The node's sets are shared through its netns only.
            super::nft::judge(ctx, *i, n, &profile.digest, nv, platform, node, acc);
        }
        match res {
            Some(ImageResolution::Resolved(profile)) => match &profile.iptables {
                Some(f) if f.backend.is_some() => facts.push(Judged {
                    index: *i,
                    scope: ctx.containers[*i].scope,
                    facts: f,
                    digest: &profile.digest,
                }),
                _ => {
                    let mut f = info(ReasonCode::NoIptables);
                    f.container = Some(*i);
                    f.platform = Some(platform);
                    acc.push(f, None);
                }
            },
            Some(ImageResolution::Unresolved { error }) => {
                let mut f = ctx.unknown(ReasonCode::ImageUnresolved);
                f.container = Some(*i);
                f.platform = Some(platform);
                f.detail = Some(error);
                acc.push(f, node);
            }
            None => {
                let mut f = ctx.unknown(ReasonCode::ImageUnresolved);
                f.container = Some(*i);
                f.platform = Some(platform);
                acc.push(f, node);
            }
        }
    }

    for j in &facts {
        judge_container(ctx, j, nv, platform, node, acc);
    }
    if facts.len() > 1 {
        judge_pod(ctx, &facts, nv, platform, node, acc);
    }
}

fn platform_of<'a>(c: &'a Candidate<'a>) -> &'a Platform {
    &c.platform
}

/// The backend a container's iptables writes through on this node.
fn effective_backend(j: &Judged<'_>, nv: Option<&NodeView<'_>>) -> Option<(Backend, bool)> {
    match j.facts.backend? {
        Backend::Wrapper => match (j.scope, nv) {
            // kubelet's marker chains are in the host's netns only.
            (Scope::HostShared, Some(nv)) => Some(nv.wrapper_choice()),
            (Scope::HostShared, None) => Some((Backend::Nft, true)),
            _ => Some((Backend::Nft, true)),
        },
        b => Some((b, true)),
    }
}

fn judge_container<'a>(
    ctx: &Ctx<'_>,
    j: &Judged<'a>,
    nv: Option<&NodeView<'a>>,
    platform: &'a Platform,
    node: Option<&'a str>,
    acc: &mut Acc<'a>,
) {
    let base = |mut f: Finding<'a>| {
        f.container = Some(j.index);
        f.platform = Some(platform);
        f.image_version = j.facts.version;
        f.image_backend = j.facts.backend;
        f.image_digest = Some(j.digest);
        f
    };
    if let Some(v) = j.facts.version
        && is_known_bad(v)
    {
        acc.push(base(ctx.critical(ReasonCode::KnownBadIptables)), node);
    }
    let Some((eb, markers)) = effective_backend(j, nv) else {
        return;
    };
    let Some(nv) = nv else {
        // No node facts: only the pod-internal comparison can run.
        return;
    };
    let with_node = |mut f: Finding<'a>| {
        f = base(f);
        f.effective_backend = Some(eb);
        f.node_backend = nv.rules;
        f
    };
    if j.facts.backend == Some(Backend::Wrapper) && !markers {
        acc.push(with_node(warning(ReasonCode::WrapperNoMarkerChains)), node);
    }
    let kernel_ok = match eb {
        Backend::Nft => nv.kernel_nf_tables,
        Backend::Legacy => nv.kernel_ip_tables,
        Backend::Wrapper => None,
    };
    if kernel_ok == Some(false) {
        acc.push(
            with_node(ctx.critical(ReasonCode::KernelLacksBackend)),
            node,
        );
        return;
    }
    if j.scope != Scope::HostShared {
        return;
    }
    if let Some(target) = nv.rules.and_then(RulesBackend::target)
        && target != eb
    {
        acc.push(with_node(ctx.critical(ReasonCode::BackendMismatch)), node);
        return;
    }
    if eb != Backend::Nft {
        // legacy on legacy: same kernel interface; known-bad checked above.
        return;
    }
    let Some(v) = j.facts.version else {
        acc.push(
            with_node(ctx.unknown(ReasonCode::ImageVersionUnknown)),
            node,
        );
        return;
    };
    if v < FIRST_NATIVE_WRITER {
        // Old reader: silent loss when the rules hold (or will hold) native expressions.
        let live = nv.min_reader.filter(|m| v < *m);
        let writer = nv
            .newest_writer
            .filter(|w| w.version >= FIRST_NATIVE_WRITER);
        if live.is_some() || writer.is_some() {
            let mut f = with_node(ctx.critical(ReasonCode::OldReaderNewRules));
            f.min_reader = nv.min_reader;
            f.other = writer.map(Other::Node);
            acc.push(f, node);
        }
        return;
    }
    // New writer: who on the node reads its native expressions with an old tool?
    if let Some(r) = nv
        .oldest_pod_reader
        .filter(|r| r.version < FIRST_NATIVE_WRITER)
    {
        let mut f = with_node(ctx.critical(ReasonCode::NewWriterOldReader));
        f.other = Some(Other::Node(r));
        acc.push(f, node);
    } else if let Some(h) = nv.host_nft.filter(|h| *h < FIRST_NATIVE_WRITER) {
        // The host's tools only corrupt if something on the host saves/restores.
        let mut f = with_node(warning(ReasonCode::NewWriterOldReader));
        f.other = Some(Other::Node(Versioned {
            party: Party::Host,
            version: h,
        }));
        acc.push(f, node);
    }
    let newer_writer = nv.newest_writer.filter(|w| w.version > v);
    let newer_rules = nv.min_reader.filter(|m| *m > v);
    if newer_writer.is_some() || newer_rules.is_some() {
        let mut f = with_node(warning(ReasonCode::ReaderOlderThanWriter));
        f.other = newer_writer.map(Other::Node);
        f.min_reader = nv.min_reader;
        acc.push(f, node);
    }
}

/// Containers of one pod share one rule set (the pod's netns, or the node's):
/// each reads what the others write.
fn judge_pod<'a>(
    ctx: &Ctx<'_>,
    facts: &[Judged<'a>],
    nv: Option<&NodeView<'a>>,
    platform: &'a Platform,
    node: Option<&'a str>,
    acc: &mut Acc<'a>,
) {
    let mk = |mut f: Finding<'a>, j: &Judged<'a>, o: &Judged<'a>, eb: Backend| {
        f.container = Some(j.index);
        f.platform = Some(platform);
        f.image_version = j.facts.version;
        f.image_backend = j.facts.backend;
        f.image_digest = Some(j.digest);
        f.effective_backend = Some(eb);
        f.other = Some(Other::Container {
            index: o.index,
            version: o.facts.version,
            backend: o.facts.backend,
        });
        f
    };
    // The node comparison already reports host-shared backend splits when
    // the node's backend is known.
    let node_known = nv
        .and_then(|n| n.rules)
        .and_then(RulesBackend::target)
        .is_some();
    // No allocation here: this runs once per node.
    let eb = |j: &Judged<'a>| effective_backend(j, nv).map(|(b, _)| b);
    let first_nft = facts.iter().find(|j| eb(j) == Some(Backend::Nft));
    let first_legacy = facts.iter().find(|j| eb(j) == Some(Backend::Legacy));
    if let (Some(n), Some(l)) = (first_nft, first_legacy)
        && !(node_known && l.scope == Scope::HostShared)
    {
        acc.push(
            mk(
                ctx.critical(ReasonCode::PodBackendMismatch),
                l,
                n,
                Backend::Legacy,
            ),
            node,
        );
    }
    let nft = || facts.iter().filter(|j| eb(j) == Some(Backend::Nft));
    if nft().count() < 2 {
        return;
    }
    if let Some(unknown) = nft().find(|j| j.facts.version.is_none()) {
        if unknown.scope == Scope::PodNetns {
            let mut f = ctx.unknown(ReasonCode::ImageVersionUnknown);
            f.container = Some(unknown.index);
            f.platform = Some(platform);
            f.image_backend = unknown.facts.backend;
            f.image_digest = Some(unknown.digest);
            acc.push(f, node);
        }
        return;
    }
    let (Some(o), Some(n)) = (
        nft().min_by_key(|j| j.facts.version),
        nft().max_by_key(|j| j.facts.version),
    ) else {
        return;
    };
    let (Some(ov), Some(nvv)) = (o.facts.version, n.facts.version) else {
        return;
    };
    if ov < FIRST_NATIVE_WRITER && nvv >= FIRST_NATIVE_WRITER {
        acc.push(
            mk(
                ctx.critical(ReasonCode::PodOldReaderNewWriter),
                o,
                n,
                Backend::Nft,
            ),
            node,
        );
    } else if ov >= FIRST_NATIVE_WRITER && ov < nvv {
        acc.push(
            mk(
                warning(ReasonCode::PodReaderOlderThanWriter),
                o,
                n,
                Backend::Nft,
            ),
            node,
        );
    }
}
