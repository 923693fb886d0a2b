//! Where a workload sits in its manifest: the file as given on the command
//! line, the line its object starts on, and the line naming each container.
//! The CI formats point annotations there.

use super::outline::{Outline, json_documents, yaml_documents};
use crate::compat::evaluate::{ContainerKind, WorkloadKind};

/// One workload's place in the manifests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectSource {
    /// The manifest file as given; None for stdin.
    pub file: Option<String>,
    /// 1-based line the object starts on; None when it could not be located.
    pub line: Option<usize>,
    pub containers: Vec<ContainerLine>,
}

/// A container entry: the line of its `name` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLine {
    pub kind: ContainerKind,
    pub name: String,
    pub line: usize,
}

impl ObjectSource {
    /// The line for a finding about `container` (as reasons name it:
    /// `x`, `x (init)`, `x (ephemeral)`), else the object's own line.
    pub fn line_for(&self, container: Option<&str>) -> Option<usize> {
        let found = container.and_then(|shown| {
            let (name, kind) = container_identity(shown);
            self.containers
                .iter()
                .find(|c| c.kind == kind && c.name == name)
        });
        found.map(|c| c.line).or(self.line)
    }
}

/// A reason's container as the verdict engine renders it -> (name, kind).
/// Container names are DNS labels, so the suffixes cannot be part of one.
fn container_identity(shown: &str) -> (&str, ContainerKind) {
    if let Some(name) = shown.strip_suffix(" (init)") {
        (name, ContainerKind::Init)
    } else if let Some(name) = shown.strip_suffix(" (ephemeral)") {
        (name, ContainerKind::Ephemeral)
    } else {
        (shown, ContainerKind::App)
    }
}

/// Outlines of a file's documents, numbered like the loader's documents;
/// None when the scanner's count disagrees with the parser's (then no
/// line is better than a wrong one).
pub fn file_outlines(text: &str, json: bool, parsed_documents: usize) -> Option<Vec<Outline>> {
    let docs = if json {
        json_documents(text)
    } else {
        yaml_documents(text)
    };
    (docs.len() == parsed_documents).then_some(docs)
}

/// The object's outline: document `doc` (1-based), or item `item` of the
/// List in it. Checked against the parsed object's kind and name.
pub fn object_outline<'o>(
    docs: &'o [Outline],
    doc: usize,
    item: Option<usize>,
    kind: &str,
    name: Option<&str>,
) -> Option<&'o Outline> {
    let mut o = docs.get(doc.checked_sub(1)?)?;
    if let Some(i) = item {
        o = o.get("items")?.items().get(i)?;
    }
    let same_kind = o.get("kind").and_then(Outline::as_str) == Some(kind);
    let scanned_name = o.get("metadata").and_then(|m| m.get("name"));
    let same_name = scanned_name.and_then(Outline::as_str) == name;
    (same_kind && same_name).then_some(o)
}

/// The object's line and its container entries.
pub fn locate(object: &Outline, kind: WorkloadKind) -> (usize, Vec<ContainerLine>) {
    let mut containers = Vec::new();
    let spec = kind
        .pod_template()
        .spec
        .iter()
        .try_fold(object, |o, key| o.get(key));
    if let Some(spec) = spec {
        for (field, kind) in [
            ("initContainers", ContainerKind::Init),
            ("containers", ContainerKind::App),
            ("ephemeralContainers", ContainerKind::Ephemeral),
        ] {
            for item in spec.get(field).map(Outline::items).unwrap_or(&[]) {
                if let Some(entry) = item.entry("name")
                    && let Some(name) = entry.value.as_str()
                {
                    containers.push(ContainerLine {
                        kind,
                        name: name.to_string(),
                        line: entry.line,
                    });
                }
            }
        }
    }
    (object.line, containers)
}

#[cfg(test)]
#[path = "positions_tests.rs"]
mod tests;
