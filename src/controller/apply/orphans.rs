//! Profiles whose Node no longer exists (pure part). Owner references let
//! the garbage collector remove them too; this catches profiles created
//! without one, or left while the collector lagged.

use crate::api::NodeNetfilterProfile;
use crate::controller::plan::profile_node;
use std::collections::HashSet;

/// A profile to delete, with its uid as a delete precondition (so a profile
/// recreated meanwhile under the same name is never removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    pub name: String,
    pub uid: Option<String>,
    pub node: String,
}

/// Profiles naming a node absent from `nodes`: candidates only. Read the
/// profiles *before* the nodes (a profile is only created for an existing
/// node, so a node missing from the later read is gone or not seen yet),
/// and confirm each candidate's node is gone before deleting.
pub fn orphans<'a>(
    profiles: impl IntoIterator<Item = &'a NodeNetfilterProfile>,
    nodes: &HashSet<String>,
) -> Vec<Orphan> {
    profiles
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let name = p.metadata.name.clone()?;
            let node = profile_node(p)?.to_string();
            (!nodes.contains(&node)).then(|| Orphan {
                name,
                uid: p.metadata.uid.clone(),
                node,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeNetfilterProfileSpec;

    fn profile(name: &str, node: Option<&str>) -> NodeNetfilterProfile {
        let mut p = NodeNetfilterProfile::new(
            name,
            NodeNetfilterProfileSpec {
                node_name: node.map(str::to_string),
            },
        );
        p.metadata.uid = Some(format!("uid-{name}"));
        p
    }

    #[test]
    fn profiles_without_their_node_are_orphans() {
        let nodes: HashSet<String> = ["a".to_string(), "b".to_string()].into();
        let ps = vec![
            profile("a", None),
            profile("c", None),
            // Named after no node: spec.nodeName naming node b keeps it not.
            profile("x", Some("b")),
            // Named after node b: a stray spec.nodeName does not orphan it.
            profile("b", Some("gone")),
        ];
        let o = orphans(&ps, &nodes);
        assert_eq!(
            o,
            vec![
                Orphan {
                    name: "c".into(),
                    uid: Some("uid-c".into()),
                    node: "c".into()
                },
                Orphan {
                    name: "x".into(),
                    uid: Some("uid-x".into()),
                    node: "x".into()
                },
            ]
        );
    }

    #[test]
    fn profiles_being_deleted_are_left_alone() {
        let mut p = profile("c", None);
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T00:00:00Z".parse().unwrap(),
        ));
        assert!(orphans(&[p], &HashSet::new()).is_empty());
    }
}
