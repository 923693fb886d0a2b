//! crds/ is generated from the Rust types in src/api: these tests fail when
//! the checked-in YAML drifts from them, and check that every schema is
//! structural (the API server rejects non-structural v1 CRDs).

use serde_json::Value;
use std::path::PathBuf;

const CRD_FILE: &str = "crds/nfguard.io_crds.yaml";
const REGENERATE: &str = "regenerate with: cargo run -- crd > crds/nfguard.io_crds.yaml (or NFGUARD_UPDATE_CRDS=1 cargo test --test it install_crds::)";

fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

#[test]
fn crds_dir_matches_rust_types() {
    let path = repo_path(CRD_FILE);
    let on_disk = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; {REGENERATE}", path.display()));
    let generated = nfguard::api::crds_yaml();
    if on_disk != generated && std::env::var("NFGUARD_UPDATE_CRDS").as_deref() == Ok("1") {
        std::fs::write(&path, &generated).expect("write crds/");
        println!("NFGUARD_UPDATE_CRDS=1: rewrote {CRD_FILE}");
        return;
    }
    if on_disk != generated {
        let first_diff = on_disk
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map(|i| i + 1)
            .unwrap_or_else(|| on_disk.lines().count().min(generated.lines().count()) + 1);
        panic!(
            "{CRD_FILE} drifted from src/api (first difference at line {first_diff}); {REGENERATE}"
        );
    }
}

#[test]
fn crd_subcommand_prints_the_same_yaml() {
    let out = assert_cmd::Command::cargo_bin("nfguard")
        .expect("binary built")
        .arg("crd")
        .output()
        .expect("nfguard crd runs");
    assert!(out.status.success(), "nfguard crd failed: {out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        nfguard::api::crds_yaml()
    );
}

fn crd_docs() -> Vec<Value> {
    nfguard::api::crds()
        .iter()
        .map(|c| serde_json::to_value(c).expect("CRD serializes"))
        .collect()
}

/// Violations of the structural-schema rules
/// (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema),
/// collected with their JSON path so a failure names the field.
fn structural_violations(schema: &Value, path: &str, out: &mut Vec<String>) {
    let Some(obj) = schema.as_object() else {
        out.push(format!("{path}: schema is not an object"));
        return;
    };
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    for forbidden in [
        "$ref",
        "definitions",
        "$defs",
        "$schema",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
    ] {
        // Junctors are legal only without types inside; schemars emits none here, so any is suspect.
        if obj.contains_key(forbidden) {
            out.push(format!("{path}: has `{forbidden}`"));
        }
    }
    match obj.get("type").and_then(Value::as_str) {
        None if !(preserve || int_or_string) => out.push(format!(
            "{path}: no `type` (and no x-kubernetes-preserve-unknown-fields)"
        )),
        Some("object") => {
            let props = obj.get("properties").and_then(Value::as_object);
            let additional = obj.get("additionalProperties");
            if props.is_some() && additional.is_some() {
                out.push(format!("{path}: both properties and additionalProperties"));
            }
            if props.is_none() && additional.is_none() && !preserve {
                out.push(format!(
                    "{path}: object without properties needs x-kubernetes-preserve-unknown-fields"
                ));
            }
            for (name, sub) in props.into_iter().flatten() {
                structural_violations(sub, &format!("{path}.{name}"), out);
            }
            match additional {
                Some(Value::Bool(false)) | None => {}
                Some(sub @ Value::Object(_)) => {
                    structural_violations(sub, &format!("{path}.<value>"), out)
                }
                Some(other) => out.push(format!("{path}: additionalProperties {other}")),
            }
            if let Some(req) = obj.get("required").and_then(Value::as_array) {
                for r in req {
                    let name = r.as_str().unwrap_or_default();
                    if !props.is_some_and(|p| p.contains_key(name)) {
                        out.push(format!("{path}: required `{name}` is not a property"));
                    }
                }
            }
        }
        Some("array") => match obj.get("items") {
            Some(items) => structural_violations(items, &format!("{path}[]"), out),
            None => out.push(format!("{path}: array without items")),
        },
        Some("string" | "integer" | "number" | "boolean") => {}
        Some(other) => out.push(format!("{path}: unknown type `{other}`")),
        None => {}
    }
}

#[test]
fn every_crd_schema_is_structural() {
    for crd in crd_docs() {
        let name = crd["metadata"]["name"].as_str().unwrap_or("?").to_string();
        let versions = crd["spec"]["versions"].as_array().expect("versions");
        assert!(!versions.is_empty(), "{name}: no versions");
        assert_eq!(
            versions.iter().filter(|v| v["storage"] == true).count(),
            1,
            "{name}: exactly one storage version"
        );
        for v in versions {
            let schema = &v["schema"]["openAPIV3Schema"];
            let mut errors = Vec::new();
            structural_violations(schema, &name, &mut errors);
            // Only name/generateName may be constrained under metadata; we set none.
            assert!(
                schema["properties"].get("metadata").is_none(),
                "{name}: schema must not describe metadata"
            );
            assert!(
                errors.is_empty(),
                "{name} is not structural:\n{}",
                errors.join("\n")
            );
        }
    }
}

/// `[?(@.type=="X")]` selects array items as `[*]` does (the filter's own
/// dots are not path steps).
fn without_filters(json_path: &str) -> String {
    let mut out = String::new();
    let mut rest = json_path;
    while let Some(start) = rest.find("[?(") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find(")]") else {
            break;
        };
        out.push_str("[*]");
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out
}

/// Walks `.a.b[*].c` (or `.a.b[?(...)].c`) through the schema: every printer
/// column must point at a real field.
fn schema_has_path(schema: &Value, json_path: &str) -> bool {
    let mut node = schema;
    let json_path = without_filters(json_path);
    for part in json_path.trim_start_matches('.').split('.') {
        let (field, is_array) = match part.strip_suffix("[*]") {
            Some(f) => (f, true),
            None => (part, false),
        };
        if field == "metadata" {
            return true; // metadata is implicit in every CRD
        }
        match node["properties"].get(field) {
            Some(next) => node = next,
            None => return false,
        }
        if is_array {
            node = &node["items"];
        }
    }
    true
}

#[test]
fn printer_columns_and_short_names() {
    let docs = crd_docs();
    let mut short_names = Vec::new();
    for crd in &docs {
        let name = crd["metadata"]["name"].as_str().unwrap_or("?");
        assert_eq!(crd["spec"]["scope"], "Cluster", "{name} is cluster-scoped");
        for s in crd["spec"]["names"]["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
        {
            short_names.push(s.as_str().unwrap_or_default().to_string());
        }
        for v in crd["spec"]["versions"].as_array().into_iter().flatten() {
            let schema = &v["schema"]["openAPIV3Schema"];
            let columns = v["additionalPrinterColumns"]
                .as_array()
                .expect("printer columns");
            assert!(
                columns.iter().any(|c| c["name"] == "Age"),
                "{name}: Age column"
            );
            for col in columns {
                let path = col["jsonPath"].as_str().expect("jsonPath");
                assert!(
                    schema_has_path(schema, path),
                    "{name}: printer column {} points at {path}, which the schema lacks",
                    col["name"]
                );
            }
        }
    }
    short_names.sort();
    assert_eq!(short_names, ["nfpol", "nnp"]);
}

#[test]
fn profile_has_status_subresource_and_policy_defaults() {
    let docs = crd_docs();
    let profile = docs
        .iter()
        .find(|c| c["spec"]["names"]["kind"] == "NodeNetfilterProfile")
        .expect("profile CRD");
    assert!(
        profile["spec"]["versions"][0]["subresources"]["status"].is_object(),
        "the reporter and controller write status through the status subresource"
    );
    let policy = docs
        .iter()
        .find(|c| c["spec"]["names"]["kind"] == "NetfilterPolicy")
        .expect("policy CRD");
    let spec = &policy["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["properties"]["action"]["default"], "Deny");
    assert!(
        policy["spec"]["versions"][0]["subresources"]["status"].is_object(),
        "the controller writes a policy's conditions through the status subresource"
    );
    let status =
        &policy["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
    assert!(
        status["properties"]["conditions"]["items"]["properties"]["reason"].is_object(),
        "{status}"
    );
    assert_eq!(spec["properties"]["unresolvedImages"]["default"], "Warn");
}

/// Every "Default X." a NetfilterPolicy field's documentation states is what
/// the code does with the field left out: the serde default, or for optional
/// fields the effective default the judgement applies.
#[test]
fn documented_policy_defaults_are_the_codes() {
    use nfguard::api::policy::NetfilterPolicySpec;
    let crd = crd_docs()
        .into_iter()
        .find(|c| c["spec"]["names"]["kind"] == "NetfilterPolicy")
        .expect("the NetfilterPolicy CRD");
    let props = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let empty: NetfilterPolicySpec = serde_json::from_str("{}").unwrap();
    let serialized = serde_json::to_value(&empty).unwrap();
    // Optional fields: left out, the judgement uses these.
    let effective = |field: &str| -> Option<String> {
        match field {
            "maxTaintedNodesPercent" => {
                Some(nfguard::controller::taints::DEFAULT_MAX_TAINTED_PERCENT.to_string())
            }
            "registryTimeoutSeconds" => nfguard::compat::evaluate::EffectivePolicy::default()
                .registry_timeout_seconds
                .map(|t| t.to_string())
                .or(Some("none".into())),
            _ => None,
        }
    };
    let mut checked = 0;
    for (field, schema) in props.as_object().unwrap() {
        let doc = schema["description"].as_str().unwrap_or("");
        let Some((_, rest)) = doc.split_once("Default ") else {
            continue;
        };
        let stated = rest.split(['.', ':', ' ']).next().unwrap();
        let actual = match &serialized[field] {
            Value::Null => effective(field)
                .unwrap_or_else(|| panic!("{field}: no effective default known to this test")),
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        assert_eq!(stated, actual, "{field}: documented {doc:?}");
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} documented defaults found");
}
