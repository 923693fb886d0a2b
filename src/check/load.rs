//! Reading manifests, profiles, nodes and policies from files (multi-document
//! YAML or JSON, `List` kinds flattened, `-` for stdin) with errors that name
//! the file, the document and the field.

use super::outline::Outline;
use super::positions::{self, ObjectSource};
use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::capped::{read_capped, read_file_capped};
use crate::compat::evaluate::{Workload, WorkloadError};
use k8s_openapi::api::core::v1::Node;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Refuse inputs larger than this (a manifest set is kilobytes, not gigabytes).
pub const MAX_INPUT_BYTES: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}: larger than {max} bytes")]
    TooLarge { path: String, max: u64 },
    #[error("{path}: document {doc}: malformed YAML: {error}")]
    Yaml {
        path: String,
        doc: usize,
        error: serde_yaml::Error,
    },
    #[error("{path}: malformed JSON: {error}")]
    Json {
        path: String,
        error: serde_json::Error,
    },
    #[error("{path}: document {doc}: not an object with a kind")]
    NotAnObject { path: String, doc: usize },
    #[error("{path}: document {doc}: {error}")]
    Workload {
        path: String,
        doc: usize,
        error: WorkloadError,
    },
    #[error("{path}: document {doc} is a {kind:?}, expected {expected}")]
    WrongKind {
        path: String,
        doc: usize,
        kind: String,
        expected: &'static str,
    },
    #[error("{path}: document {doc} ({kind} {name}): field {field}: {message}")]
    Shape {
        path: String,
        doc: usize,
        kind: &'static str,
        name: String,
        field: String,
        message: String,
    },
    #[error("{path}: no {expected} found")]
    Empty {
        path: String,
        expected: &'static str,
    },
    #[error(
        "no workload (Pod, DaemonSet, Deployment, StatefulSet, ReplicaSet, Job, CronJob) in {files}{skipped}"
    )]
    NoWorkloads { files: String, skipped: String },
}

/// One parsed document and where it came from.
#[derive(Debug, Clone)]
pub struct Doc {
    pub path: String,
    /// 1-based document number within the file (List items share their List's number).
    pub doc: usize,
    /// The index within its List for a List's item.
    pub item: Option<usize>,
    pub value: Value,
}

/// Read `path` (`-` is stdin) with the size limit.
pub fn read_input(path: &str) -> Result<String, LoadError> {
    let io = |error| LoadError::Io {
        path: path.to_string(),
        error,
    };
    let read = if path == "-" {
        read_capped(std::io::stdin(), MAX_INPUT_BYTES)
    } else {
        read_file_capped(Path::new(path), MAX_INPUT_BYTES)
    };
    let Some(buf) = read.map_err(io)? else {
        return Err(LoadError::TooLarge {
            path: path.to_string(),
            max: MAX_INPUT_BYTES,
        });
    };
    String::from_utf8(buf).map_err(|e| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8: {e}"),
        ))
    })
}

/// JSON (an object or an array of them) rather than a YAML stream.
pub fn is_json(text: &str) -> bool {
    let trimmed = text.trim_start();
    trimmed.starts_with('{') || trimmed.starts_with('[')
}

/// Parse a JSON document or a YAML stream into documents; empty YAML
/// documents are dropped and `*List` kinds are flattened into their items.
pub fn parse_documents(path: &str, text: &str) -> Result<Vec<Doc>, LoadError> {
    parse_counted(path, text).map(|(docs, _)| docs)
}

/// [`parse_documents`] and how many documents the text holds (empty ones
/// and whole Lists counted once), which source positions are checked against.
fn parse_counted(path: &str, text: &str) -> Result<(Vec<Doc>, usize), LoadError> {
    let mut raw: Vec<(usize, Value)> = Vec::new();
    let mut count = 0;
    if is_json(text) {
        let v: Value = serde_json::from_str(text).map_err(|error| LoadError::Json {
            path: path.to_string(),
            error,
        })?;
        match v {
            Value::Array(items) => {
                count = items.len();
                raw.extend(items.into_iter().enumerate().map(|(i, v)| (i + 1, v)))
            }
            v => {
                count = 1;
                raw.push((1, v))
            }
        }
    } else {
        for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
            count = i + 1;
            let v = Value::deserialize_yaml(de).map_err(|error| LoadError::Yaml {
                path: path.to_string(),
                doc: i + 1,
                error,
            })?;
            if !v.is_null() {
                raw.push((i + 1, v));
            }
        }
    }
    let mut out = Vec::new();
    for (doc, v) in raw {
        let Some(kind) = v.get("kind").and_then(Value::as_str) else {
            return Err(LoadError::NotAnObject {
                path: path.to_string(),
                doc,
            });
        };
        if kind.ends_with("List")
            && let Some(Value::Array(items)) = v.get("items")
        {
            for (i, item) in items.iter().enumerate() {
                if item.get("kind").and_then(Value::as_str).is_none() {
                    return Err(LoadError::NotAnObject {
                        path: path.to_string(),
                        doc,
                    });
                }
                out.push(Doc {
                    path: path.to_string(),
                    doc,
                    item: Some(i),
                    value: item.clone(),
                });
            }
            continue;
        }
        out.push(Doc {
            path: path.to_string(),
            doc,
            item: None,
            value: v,
        });
    }
    Ok((out, count))
}

trait DeserializeYaml: Sized {
    fn deserialize_yaml(de: serde_yaml::Deserializer<'_>) -> Result<Self, serde_yaml::Error>;
}

impl DeserializeYaml for Value {
    fn deserialize_yaml(de: serde_yaml::Deserializer<'_>) -> Result<Self, serde_yaml::Error> {
        // Through serde_yaml::Value so YAML-only forms (non-string keys, tags)
        // become clear errors instead of surprises.
        let y: serde_yaml::Value = serde::Deserialize::deserialize(de)?;
        serde_yaml::from_value(y)
    }
}

/// Documents of every file in `path`: the file itself, or every
/// `*.yaml|*.yml|*.json` below the directory, sorted by path.
pub fn load_path(path: &Path) -> Result<Vec<Doc>, LoadError> {
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|error| LoadError::Io {
        path: shown.clone(),
        error,
    })?;
    let files = if meta.is_dir() {
        let mut files = Vec::new();
        collect_files(path, &mut files, 0)?;
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut docs = Vec::new();
    for f in files {
        let p = f.display().to_string();
        let text = read_input(&p)?;
        docs.extend(parse_documents(&p, &text)?);
    }
    Ok(docs)
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Result<(), LoadError> {
    let io = |error| LoadError::Io {
        path: dir.display().to_string(),
        error,
    };
    if depth > 8 {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let p = entry.map_err(io)?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // Secret/ConfigMap volumes keep real files under ..data and hidden dirs.
        if name.starts_with('.') {
            continue;
        }
        if p.is_dir() {
            collect_files(&p, out, depth + 1)?;
        } else if name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json") {
            out.push(p);
        }
    }
    Ok(())
}

/// Deserialize one document as `T`, naming the failing field.
fn typed<T: DeserializeOwned>(d: &Doc, kind: &'static str) -> Result<T, LoadError> {
    serde_path_to_error::deserialize(&d.value).map_err(|e| LoadError::Shape {
        path: d.path.clone(),
        doc: d.doc,
        kind,
        name: d
            .value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("<unnamed>")
            .to_string(),
        field: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

fn expect_kind(d: &Doc, kind: &'static str) -> Result<(), LoadError> {
    let got = d.value.get("kind").and_then(Value::as_str).unwrap_or("");
    if got == kind {
        Ok(())
    } else {
        Err(LoadError::WrongKind {
            path: d.path.clone(),
            doc: d.doc,
            kind: got.to_string(),
            expected: kind,
        })
    }
}

fn load_typed<T: DeserializeOwned>(path: &Path, kind: &'static str) -> Result<Vec<T>, LoadError> {
    let docs = load_path(path)?;
    if docs.is_empty() {
        return Err(LoadError::Empty {
            path: path.display().to_string(),
            expected: kind,
        });
    }
    docs.iter()
        .map(|d| {
            expect_kind(d, kind)?;
            typed(d, kind)
        })
        .collect()
}

/// NodeNetfilterProfiles (as `nfguard inspect node --as-profile` prints).
/// Unknown extra fields are tolerated; a known field of the wrong shape is an error.
pub fn load_profiles(path: &Path) -> Result<Vec<NodeNetfilterProfile>, LoadError> {
    load_typed(path, "NodeNetfilterProfile")
}

pub fn load_nodes(path: &Path) -> Result<Vec<Node>, LoadError> {
    load_typed(path, "Node")
}

pub fn load_policies(path: &Path) -> Result<Vec<NetfilterPolicy>, LoadError> {
    load_typed(path, "NetfilterPolicy")
}

/// Workloads from manifest files; other kinds come back as notes.
#[derive(Default)]
pub struct Manifests {
    pub workloads: Vec<Workload>,
    /// Where each workload is (same order as `workloads`).
    pub sources: Vec<ObjectSource>,
    /// "skipped ConfigMap/kube-system/x (FILE): not a workload kind".
    pub notes: Vec<String>,
    /// The file each note is about (same order as `notes`).
    pub note_files: Vec<String>,
}

pub fn load_manifests(files: &[String]) -> Result<Manifests, LoadError> {
    let mut workloads = Vec::new();
    let mut sources = Vec::new();
    let mut notes = Vec::new();
    let mut note_files = Vec::new();
    for f in files {
        let text = read_input(f)?;
        let (docs, count) = parse_counted(f, &text)?;
        let outlines = positions::file_outlines(&text, is_json(&text), count);
        for d in docs {
            match Workload::from_value(&d.value) {
                Ok(Some(w)) => {
                    sources.push(source_of(f, &d, &w, outlines.as_deref()));
                    workloads.push(w);
                }
                Ok(None) => {
                    let kind = d.value.get("kind").and_then(Value::as_str).unwrap_or("?");
                    let name = d
                        .value
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("<unnamed>");
                    notes.push(format!(
                        "skipped {kind}/{name} ({f}, document {}): not a workload kind",
                        d.doc
                    ));
                    note_files.push(f.clone());
                }
                Err(error) => {
                    return Err(LoadError::Workload {
                        path: d.path,
                        doc: d.doc,
                        error,
                    });
                }
            }
        }
    }
    if workloads.is_empty() {
        return Err(LoadError::NoWorkloads {
            files: files.join(", "),
            skipped: if notes.is_empty() {
                String::new()
            } else {
                format!(" ({})", notes.join("; "))
            },
        });
    }
    Ok(Manifests {
        workloads,
        sources,
        notes,
        note_files,
    })
}

/// The workload's file (None for stdin) and, when the scanner finds it, its lines.
fn source_of(file: &str, d: &Doc, w: &Workload, outlines: Option<&[Outline]>) -> ObjectSource {
    let kind = w.kind.as_str();
    let name = d.value.pointer("/metadata/name").and_then(Value::as_str);
    let located = outlines
        .and_then(|docs| positions::object_outline(docs, d.doc, d.item, kind, name))
        .map(|o| positions::locate(o, w.kind));
    let (line, containers) = match located {
        Some((line, containers)) => (Some(line), containers),
        None => (None, Vec::new()),
    };
    ObjectSource {
        file: (file != "-").then(|| file.to_string()),
        line,
        containers,
    }
}
