//! What judging needs of each Node that does not depend on the workload:
//! its profile, its platform and its class (nodes of one class get the same
//! findings). The webhook builds it once per facts generation, so an
//! admission against 5,000 nodes does not look up every node's profile by
//! name, parse its platform labels and hash its view again (profiled: most
//! of a request's judging time).

use super::candidates::{node_platform, profile_node_name};
use super::rules::{NodeState, node_state};
use crate::api::NodeNetfilterProfile;
use crate::facts::Platform;
use foldhash::HashMap;
use k8s_openapi::api::core::v1::Node;

/// Per node, in the order of the `nodes` it was built from.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    /// Index into the `profiles` it was built from.
    pub profile: Option<u32>,
    /// Index into [`NodeIndex::platforms`].
    pub platform: u32,
    pub class: u32,
}

#[derive(Debug, Default)]
pub struct NodeIndex {
    pub(super) entries: Vec<Entry>,
    /// Each distinct platform once.
    pub(super) platforms: Vec<Platform>,
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
        let entries = nodes
            .iter()
            .map(|node| {
                let platform = node_platform(node.metadata.labels.as_ref(), default_platform);
                let platform = match platforms.iter().position(|p| *p == platform) {
                    Some(i) => i,
                    None => {
                        platforms.push(platform);
                        platforms.len() - 1
                    }
                } as u32;
                let profile = node
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|n| by_node.get(n).copied());
                let state = node_state(profile.map(|i| profiles[i as usize]));
                let next = classes.len() as u32;
                let class = *classes.entry((platform, state)).or_insert(next);
                Entry {
                    profile,
                    platform,
                    class,
                }
            })
            .collect();
        NodeIndex { entries, platforms }
    }

    /// Whether it was built for `nodes` (their count, at least).
    pub(super) fn fits(&self, nodes: usize) -> bool {
        self.entries.len() == nodes
    }

    /// How many distinct node classes.
    pub fn classes(&self) -> usize {
        self.entries
            .iter()
            .map(|e| e.class as usize + 1)
            .max()
            .unwrap_or(0)
    }
}
