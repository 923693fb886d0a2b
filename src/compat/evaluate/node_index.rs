//! What judging needs of each Node that does not depend on the workload:
//! its profile, its platform and its class (nodes of one class get the same
//! findings). The webhook builds it once per facts generation, so an
//! admission against 5,000 nodes does not look up every node's profile by
//! name, parse its platform labels and hash its view again (profiled: most
//! of a request's judging time).

use super::candidate::{Candidate, node_platform, profile_node_name, tolerated};
use super::nodeview::{NodeState, node_state};
use crate::api::NodeNetfilterProfile;
use crate::facts::Platform;
use foldhash::HashMap;
use k8s_openapi::api::core::v1::{Node, Taint, Toleration};
use std::borrow::Cow;

/// Per node, in the order of the `nodes` it was built from.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    /// Index into the `profiles` it was built from.
    pub profile: Option<u32>,
    /// Index into [`NodeIndex::platforms`].
    pub platform: u32,
    pub class: u32,
    /// Index into [`NodeIndex::taint_sets`].
    pub taints: u32,
}

/// A node's taints and `spec.unschedulable`.
type TaintSet = (Vec<Taint>, bool);

/// What toleration matching reads of a taint set: each taint's key, value
/// and effect (not `timeAdded`), and `unschedulable`.
type TaintKey<'n> = (Vec<(&'n str, Option<&'n str>, &'n str)>, bool);

#[derive(Debug, Default)]
pub struct NodeIndex {
    pub(super) entries: Vec<Entry>,
    /// Each distinct platform once.
    pub(super) platforms: Vec<Platform>,
    /// Each distinct taint set once.
    taint_sets: Vec<TaintSet>,
    /// The nodes' names, in `entries` order (None: a Node without one).
    names: Vec<Option<String>>,
}

impl NodeIndex {
    /// The index of `nodes` and `profiles`; a scene must pass the very same
    /// slices (same order) with it.
    pub fn new(
        profiles: &[&NodeNetfilterProfile],
        nodes: &[&Node],
        default_platform: &Platform,
    ) -> Self {
        let by_node: HashMap<&str, u32> = profiles
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((profile_node_name(p)?, u32::try_from(i).ok()?)))
            .collect();
        let mut platforms: Vec<Platform> = Vec::new();
        let mut classes: HashMap<(u32, NodeState<'_>), u32> = HashMap::default();
        let mut taint_sets: Vec<TaintSet> = Vec::new();
        // Hashed: per-node taints could make thousands of distinct sets.
        let mut taint_ids: HashMap<TaintKey<'_>, u32> = HashMap::default();
        let entries = nodes
            .iter()
            .map(|node| {
                let platform = node_platform(node.metadata.labels.as_ref(), default_platform);
                // Few platforms: compared, not hashed.
                let platform = match platforms.iter().position(|p| *p == platform) {
                    Some(i) => i as u32,
                    None => push(&mut platforms, platform),
                };
                let profile = node
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|n| by_node.get(n).copied());
                let state = node_state(profile.map(|i| profiles[i as usize]));
                let next = classes.len() as u32;
                let class = *classes.entry((platform, state)).or_insert(next);
                let spec = node.spec.as_ref();
                let taints = spec.and_then(|s| s.taints.as_deref()).unwrap_or(&[]);
                let unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
                let key = taints
                    .iter()
                    .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
                    .collect();
                let taints = *taint_ids
                    .entry((key, unschedulable))
                    .or_insert_with(|| push(&mut taint_sets, (taints.to_vec(), unschedulable)));
                Entry {
                    profile,
                    platform,
                    class,
                    taints,
                }
            })
            .collect();
        NodeIndex {
            entries,
            platforms,
            taint_sets,
            names: nodes.iter().map(|n| n.metadata.name.clone()).collect(),
        }
    }

    /// The candidates for a workload that only taints constrain (no
    /// nodeName, nodeSelector or required node affinity), in node order;
    /// None when `stop_at(i)`, asked for the `i`th taint set, says stop.
    pub(super) fn schedulable<'a>(
        &'a self,
        tolerations: &[Toleration],
        profiles: &[&'a NodeNetfilterProfile],
        stop_at: &dyn Fn(usize) -> bool,
    ) -> Option<Vec<Candidate<'a>>> {
        let mut ok = Vec::with_capacity(self.taint_sets.len());
        for (i, (taints, unschedulable)) in self.taint_sets.iter().enumerate() {
            if stop_at(i) {
                return None;
            }
            ok.push(tolerated(taints, *unschedulable, tolerations, false));
        }
        Some(
            (0..self.entries.len())
                .filter(|&i| ok[self.entries[i].taints as usize])
                .filter_map(|i| self.candidate(i, profiles))
                .collect(),
        )
    }

    /// Whether it was built for `nodes` (their count, at least).
    pub(super) fn fits(&self, nodes: usize) -> bool {
        self.entries.len() == nodes
    }

    /// The candidate for the `i`th node (None: a Node without a name).
    pub(super) fn candidate<'a>(
        &'a self,
        i: usize,
        profiles: &[&'a NodeNetfilterProfile],
    ) -> Option<Candidate<'a>> {
        let e = self.entries[i];
        Some(Candidate {
            name: self.names[i].as_deref()?,
            platform: Cow::Borrowed(&self.platforms[e.platform as usize]),
            profile: e.profile.map(|p| profiles[p as usize]),
            class: Some(e.class),
        })
    }
}

/// Appends `item`; its index.
fn push<T>(items: &mut Vec<T>, item: T) -> u32 {
    items.push(item);
    (items.len() - 1) as u32
}
