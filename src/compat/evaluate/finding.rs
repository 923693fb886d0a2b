//! One finding of the decision table before aggregation, the accumulator
//! that groups identical findings over nodes, and the policy context that
//! sets their effect. The rules (`rules`, `nft`) make them; `render` turns
//! them into reasons.

use super::nodeview::{LiveSets, NftParty, RulesBackend, Versioned};
use super::workload::ContainerFacts;
use super::{ReasonCode, Verdict};
use crate::api::{PolicyAction, UnresolvedAction};
use crate::facts::{Backend, HazardCode, NftVersion, Platform, Severity, Version};
use foldhash::HashMap;

/// The other party of a finding.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum Other<'a> {
    Node(Versioned<'a>),
    /// Another container of the same workload (index into the containers).
    Container {
        index: usize,
        version: Option<Version>,
        backend: Option<Backend>,
    },
    /// A reader or writer of the node's nft sets (nft reasons).
    Nft(NftParty<'a>),
}

/// One finding before aggregation: everything that goes into the message,
/// so identical findings on many nodes collapse into one reason.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) struct Finding<'a> {
    pub code: ReasonCode,
    pub severity: Severity,
    pub effect: Verdict,
    pub container: Option<usize>,
    pub platform: Option<&'a Platform>,
    pub image_version: Option<Version>,
    pub image_backend: Option<Backend>,
    /// The platform manifest's digest that was judged (the image as read).
    pub image_digest: Option<&'a str>,
    /// The backend the image actually uses on this node (wrapper resolved).
    pub effective_backend: Option<Backend>,
    pub node_backend: Option<RulesBackend>,
    pub other: Option<Other<'a>>,
    pub min_reader: Option<Version>,
    pub hazard: Option<HazardCode>,
    pub detail: Option<&'a str>,
    /// The image's libnftables release (nft reasons).
    pub image_nft: Option<NftVersion>,
    /// The node's live sets that crash readers (nft reasons).
    pub nft_live: Option<LiveSets<'a>>,
}

impl<'a> Finding<'a> {
    pub(super) fn new(code: ReasonCode, severity: Severity, effect: Verdict) -> Self {
        Finding {
            code,
            severity,
            effect,
            container: None,
            platform: None,
            image_version: None,
            image_backend: None,
            image_digest: None,
            effective_backend: None,
            node_backend: None,
            other: None,
            min_reader: None,
            hazard: None,
            detail: None,
            image_nft: None,
            nft_live: None,
        }
    }
}

/// Lists up to this long are searched by comparing: cheaper than hashing.
/// Longer ones get a hash index, built when they pass it.
pub(super) const LINEAR_MAX: usize = 16;

/// Groups identical findings, each with the node classes it holds on
/// (repeats kept): a node's name is stored once, with its class, however
/// many findings hold on it (see `rules::Members`).
pub(super) struct Acc<'a> {
    /// Empty while `groups` is short (see [`LINEAR_MAX`]).
    pub(super) index: HashMap<Finding<'a>, usize>,
    pub(super) groups: Vec<(Finding<'a>, Vec<u32>)>,
    pub(super) last: Option<usize>,
    /// The groups a node was added to, in push order (see `judge_nodes`).
    pub(super) trace: Vec<usize>,
}

impl<'a> Acc<'a> {
    pub(super) fn new() -> Self {
        Acc {
            index: HashMap::default(),
            groups: Vec::new(),
            last: None,
            trace: Vec::new(),
        }
    }

    pub(super) fn find(&self, f: &Finding<'a>) -> Option<usize> {
        // Consecutive nodes usually repeat the previous finding.
        if let Some(i) = self.last
            && self.groups[i].0 == *f
        {
            return Some(i);
        }
        if self.groups.len() <= LINEAR_MAX {
            self.groups.iter().position(|g| g.0 == *f)
        } else {
            self.index.get(f).copied()
        }
    }

    /// `node`: the finding holds on the node being judged (its class is
    /// recorded by `judge_nodes`); None: not node-specific.
    pub(super) fn push(&mut self, f: Finding<'a>, node: Option<&'a str>) {
        let idx = match self.find(&f) {
            Some(i) => i,
            None => {
                self.groups.push((f, Vec::new()));
                let i = self.groups.len() - 1;
                if self.groups.len() > LINEAR_MAX {
                    if self.index.is_empty() {
                        let all = self.groups.iter().enumerate().map(|(j, g)| (g.0, j));
                        self.index.extend(all);
                    } else {
                        self.index.insert(f, i);
                    }
                }
                i
            }
        };
        self.last = Some(idx);
        if node.is_some() {
            self.trace.push(idx);
        }
    }
}

pub(super) struct Ctx<'a> {
    pub(super) action: PolicyAction,
    pub(super) unresolved: UnresolvedAction,
    pub(super) containers: &'a [ContainerFacts],
}

impl Ctx<'_> {
    pub(super) fn unsafe_effect(&self) -> Verdict {
        match self.action {
            PolicyAction::Deny => Verdict::Deny,
            PolicyAction::Warn | PolicyAction::Taint => Verdict::Warn,
        }
    }

    /// "Cannot evaluate" findings follow `unresolvedImages`.
    pub(super) fn unknown(&self, code: ReasonCode) -> Finding<'static> {
        let (sev, eff) = match self.unresolved {
            UnresolvedAction::Allow => (Severity::Info, Verdict::Allow),
            UnresolvedAction::Warn => (Severity::Warning, Verdict::Warn),
            UnresolvedAction::Deny => (Severity::Warning, Verdict::Deny),
        };
        Finding::new(code, sev, eff)
    }

    pub(super) fn critical(&self, code: ReasonCode) -> Finding<'static> {
        Finding::new(code, Severity::Critical, self.unsafe_effect())
    }
}

pub(super) fn warning(code: ReasonCode) -> Finding<'static> {
    Finding::new(code, Severity::Warning, Verdict::Warn)
}

pub(super) fn info(code: ReasonCode) -> Finding<'static> {
    Finding::new(code, Severity::Info, Verdict::Allow)
}
