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
                Some(nfguard::controller::plan::taints::DEFAULT_MAX_TAINTED_PERCENT.to_string())
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

// ---- size bounds (#37) ----

/// Each CRD's kind and schema.
fn schemas() -> Vec<(String, Value)> {
    crd_docs()
        .into_iter()
        .map(|crd| {
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_string();
            let schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
            (kind, schema)
        })
        .collect()
}

/// Strings without `maxLength` (or an `enum`), lists without `maxItems`,
/// maps without `maxProperties` or a bound on their keys.
fn unbounded(schema: &Value, path: &str, out: &mut Vec<String>) {
    let bounded = |key: &str| schema.get(key).is_some_and(Value::is_u64);
    match schema["type"].as_str() {
        Some("string") if !bounded("maxLength") && schema.get("enum").is_none() => {
            out.push(format!("{path}: string without maxLength"))
        }
        Some("array") => {
            if !bounded("maxItems") {
                out.push(format!("{path}: list without maxItems"));
            }
            unbounded(&schema["items"], &format!("{path}[]"), out);
        }
        Some("object") => {
            for (name, sub) in schema["properties"].as_object().into_iter().flatten() {
                unbounded(sub, &format!("{path}.{name}"), out);
            }
            if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
                if !bounded("maxProperties") {
                    out.push(format!("{path}: map without maxProperties"));
                }
                let keys_bounded = schema["x-kubernetes-validations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| r["rule"].as_str().is_some_and(|r| r.contains("size(k) <=")));
                if !keys_bounded {
                    out.push(format!("{path}: map keys without a size rule"));
                }
                unbounded(values, &format!("{path}{{}}"), out);
            }
            if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
                out.push(format!("{path}: unknown fields kept, of any size"));
            }
        }
        _ => {}
    }
}

#[test]
fn every_string_list_and_map_in_the_crds_is_bounded() {
    let mut out = Vec::new();
    for (kind, schema) in schemas() {
        unbounded(&schema, &kind, &mut out);
    }
    assert!(
        out.is_empty(),
        "unbounded fields (give each a bound in src/api/bounds.rs):\n{}",
        out.join("\n")
    );
}

/// The largest value `schema` admits: every property present, every string
/// at its maxLength (in ASCII), every list and map full.
fn largest(schema: &Value) -> Value {
    let max = |key: &str| schema[key].as_u64().unwrap_or(0) as usize;
    match schema["type"].as_str() {
        Some("string") => match schema["enum"].as_array() {
            Some(values) => values
                .iter()
                .filter(|v| v.is_string())
                .max_by_key(|v| v.as_str().unwrap().len())
                .cloned()
                .unwrap_or(Value::Null),
            None => Value::String("x".repeat(max("maxLength"))),
        },
        Some("integer") => match (schema["maximum"].as_f64(), schema["format"].as_str()) {
            (Some(m), _) => Value::from(m as i64),
            (None, Some("uint32")) => Value::from(u32::MAX),
            (None, Some("int32")) => Value::from(i32::MIN),
            (None, Some("uint64" | "uint")) => Value::from(u64::MAX),
            _ => Value::from(i64::MIN),
        },
        Some("number") => Value::from(-f64::MAX),
        Some("boolean") => Value::Bool(false),
        Some("array") => Value::Array(vec![largest(&schema["items"]); max("maxItems")]),
        Some("object") => match schema["additionalProperties"].as_object() {
            Some(_) => {
                let value = largest(&schema["additionalProperties"]);
                (0..max("maxProperties"))
                    .map(|i| (format!("{i:x<317}"), value.clone()))
                    .collect::<serde_json::Map<_, _>>()
                    .into()
            }
            None => schema["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, sub)| (name.clone(), largest(sub)))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        },
        _ => Value::Null,
    }
}

/// Characters in the strings of `v` (keys included).
fn string_chars(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(a) => a.iter().map(string_chars).sum(),
        Value::Object(o) => o.iter().map(|(k, v)| k.len() + string_chars(v)).sum(),
        _ => 0,
    }
}

/// What the bounds allow, printed (`--nocapture`) and held well under
/// etcd's 1.5 MiB per object: the serialized object in ASCII, and the
/// same in the worst UTF-8 (4 bytes a character; JSON's `\u` escapes of
/// control characters reach 6, and etcd refuses what is then too large).
#[test]
fn the_largest_objects_the_schemas_allow_stay_well_under_etcds_limit() {
    const ETCD_LIMIT: usize = 1536 * 1024;
    // metadata (not in the schema) with its managedFields.
    const METADATA: usize = 16 * 1024;
    for (kind, schema) in schemas() {
        let object = largest(&schema);
        let ascii = serde_json::to_vec(&object).unwrap().len() + METADATA;
        let chars = string_chars(&object);
        let utf8 = ascii + 3 * chars;
        println!(
            "{kind}: at most {ascii} bytes in ASCII ({chars} characters of text), {utf8} in 4-byte UTF-8"
        );
        let mut errors = Vec::new();
        violations(&object, &schema, &kind, &mut errors);
        assert!(errors.is_empty(), "{kind}: {errors:?}");
        assert!(
            ascii <= ETCD_LIMIT * 2 / 3,
            "{kind}: the bounds allow {ascii} bytes, near etcd's {ETCD_LIMIT}"
        );
    }
}

/// Where `value` breaks `schema` (the parts the API server checks that
/// nfguard's schemas use; patterns aside).
fn violations(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    if value.is_null() {
        if schema["nullable"] != true {
            out.push(format!("{path}: null"));
        }
        return;
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(value)
    {
        out.push(format!("{path}: {value} not in {values:?}"));
    }
    let max = |key: &str| schema[key].as_u64().map(|n| n as usize);
    match (schema["type"].as_str(), value) {
        (Some("string"), Value::String(s)) => {
            if let Some(m) = max("maxLength")
                && s.chars().count() > m
            {
                out.push(format!(
                    "{path}: {} characters > maxLength {m}",
                    s.chars().count()
                ));
            }
        }
        (Some("integer"), Value::Number(n)) if n.is_i64() || n.is_u64() => {
            if let (Some(m), Some(n)) = (schema["maximum"].as_f64(), n.as_f64())
                && n > m
            {
                out.push(format!("{path}: {n} > maximum {m}"));
            }
        }
        (Some("number"), Value::Number(_)) | (Some("boolean"), Value::Bool(_)) => {}
        (Some("array"), Value::Array(items)) => {
            if let Some(m) = max("maxItems")
                && items.len() > m
            {
                out.push(format!("{path}: {} items > maxItems {m}", items.len()));
            }
            for (i, item) in items.iter().enumerate() {
                violations(item, &schema["items"], &format!("{path}[{i}]"), out);
            }
        }
        (Some("object"), Value::Object(fields)) => {
            if let Some(m) = max("maxProperties")
                && fields.len() > m
            {
                out.push(format!(
                    "{path}: {} properties > maxProperties {m}",
                    fields.len()
                ));
            }
            for required in schema["required"].as_array().into_iter().flatten() {
                if !fields.contains_key(required.as_str().unwrap()) {
                    out.push(format!("{path}: no {required}"));
                }
            }
            for (name, v) in fields {
                let sub = match schema["properties"].get(name) {
                    Some(sub) => sub,
                    None if schema["additionalProperties"].is_object() => {
                        &schema["additionalProperties"]
                    }
                    None => {
                        out.push(format!("{path}.{name}: not in the schema (pruned)"));
                        continue;
                    }
                };
                violations(v, sub, &format!("{path}.{name}"), out);
            }
        }
        (ty, v) => out.push(format!("{path}: {v} is not a {ty:?}")),
    }
}

/// The schema of the CRD of `kind`.
fn schema_of(kind: &str) -> Value {
    schemas()
        .into_iter()
        .find(|(k, _)| k == kind)
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no CRD of kind {kind}"))
}

/// `object` (apiVersion, kind and metadata aside, which every CRD has)
/// passes its CRD's schema.
fn assert_fits(kind: &str, object: &Value) {
    let mut object = object.clone();
    for implicit in ["apiVersion", "kind", "metadata"] {
        object.as_object_mut().unwrap().remove(implicit);
    }
    let mut errors = Vec::new();
    violations(&object, &schema_of(kind), kind, &mut errors);
    assert!(
        errors.is_empty(),
        "nfguard writes a {kind} its own CRD refuses:\n{}",
        errors.join("\n")
    );
}

/// A host root whose iptables and nftables probes reach their caps: 20
/// dpkg `status.d` stanzas per tool under 250-character names and 20 apk
/// entries (16 hits and a note kept of each), versions of 95 characters
/// that disagree with the multi binary (1.8.2) at the end of a link chain.
fn capped_host_root() -> tempfile::TempDir {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let version = |i: usize| format!("1.8.9-{i}+deb12u1~bpo11+1.{}", "9".repeat(70));
    let status_d = root.join("var/lib/dpkg/status.d");
    std::fs::create_dir_all(&status_d).unwrap();
    for i in 0..20 {
        for (package, v) in [
            ("iptables", version(i)),
            ("libnftables1", format!("1.0.6-{i}+{}", "1".repeat(70))),
        ] {
            let name = format!("{package}-{i:02}-{}", "n".repeat(230));
            std::fs::write(
                status_d.join(name),
                format!("Package: {package}\nStatus: install ok installed\nVersion: {v}\n"),
            )
            .unwrap();
        }
    }
    let apk = root.join("lib/apk/db");
    std::fs::create_dir_all(&apk).unwrap();
    let mut installed = String::new();
    for i in 0..20 {
        installed.push_str(&format!("P:iptables\nV:{}\n\n", version(i)));
        installed.push_str(&format!("P:nftables\nV:1.0.6-r{i}\n\n"));
    }
    std::fs::write(apk.join("installed"), installed).unwrap();
    for d in ["usr/sbin", "etc/alternatives"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(
        root.join("usr/sbin/xtables-nft-multi"),
        b"\0%s v%s (nf_tables)\x001.8.2 (nf_tables)\0",
    )
    .unwrap();
    symlink("xtables-nft-multi", root.join("usr/sbin/iptables-nft")).unwrap();
    symlink(
        "/usr/sbin/iptables-nft",
        root.join("etc/alternatives/iptables"),
    )
    .unwrap();
    symlink("/etc/alternatives/iptables", root.join("usr/sbin/iptables")).unwrap();
    dir
}

/// Rule sets that reach every cap of the reporter: 30 unconditional drops
/// per backend (20 listed and "and N more"), a marker chain in each of the
/// ten iptables-owned tables, all seven native encodings in a chain of the
/// kernel's longest name, 100 native tables of the longest name (64
/// listed), 70 tables of sets that crash every unfixed reader (64 named,
/// 16 examples), kube-proxy's nftables table beside iptables-mode Service
/// chains. Comments and set names are long, not the kernel's longest: see
/// docs of `HAZARD_MESSAGE` and `CONDITION_MESSAGE`.
fn capped_rule_sets() -> (nfguard::kernel::RuleSet, nfguard::kernel::RuleSet) {
    use nfguard::kernel::set_userdata::SetUserdata;
    use nfguard::kernel::{
        Chain, Expr, Family, IPTABLES_TABLES, NamedSet, Rule, RuleSet, Table, Verdict,
    };
    let longest = |c: char| c.to_string().repeat(255);
    let chain = |name: &str, rules: Vec<Rule>| Chain {
        name: name.into(),
        builtin: false,
        rules,
    };
    let drop = || Rule {
        exprs: vec![
            Expr::Counter,
            Expr::Match {
                name: "comment".into(),
                comment: Some(format!(
                    "block incoming localnet connections {}",
                    "c".repeat(28)
                )),
            },
            Expr::Verdict(Verdict::Drop),
        ],
    };
    let native = Rule {
        exprs: vec![
            Expr::Meta { key: 3, set: false },
            Expr::Meta {
                key: 99,
                set: false,
            },
            Expr::Payload {
                base: 1,
                offset: 9,
                len: 1,
            },
            Expr::Payload {
                base: 2,
                offset: 13,
                len: 1,
            },
            Expr::Payload {
                base: 2,
                offset: 0,
                len: 2,
            },
            Expr::Range,
            Expr::Log,
            Expr::Verdict(Verdict::Accept),
        ],
    };
    let owned = |native_rules: bool| -> Vec<Table> {
        let mut tables = Vec::new();
        for family in [Family::Ip, Family::Ip6] {
            for name in IPTABLES_TABLES {
                let mut chains = vec![
                    chain("KUBE-IPTABLES-HINT", vec![]),
                    chain("KUBE-KUBELET-CANARY", vec![]),
                ];
                if name == "filter" {
                    chains.push(chain("KUBE-FIREWALL", (0..15).map(|_| drop()).collect()));
                }
                if name == "nat" {
                    chains.push(chain("KUBE-SERVICES", vec![]));
                }
                if native_rules && name == "security" {
                    chains.push(chain(&longest('f'), vec![native.clone()]));
                }
                tables.push(Table {
                    family,
                    name: name.into(),
                    chains,
                    sets: vec![],
                });
            }
        }
        tables
    };
    let mut nft = RuleSet {
        tables: owned(true),
    };
    for i in 0..100 {
        nft.tables.push(Table {
            family: Family::Other(255),
            name: format!("{i:03}{}", longest('t'))
                .chars()
                .take(255)
                .collect(),
            chains: vec![chain(&longest('c'), vec![Rule::default()])],
            sets: vec![],
        });
    }
    let crashing = SetUserdata {
        key_typeof: Some(63),
        ..Default::default()
    };
    for i in 0..70 {
        nft.tables.push(Table {
            family: Family::Ip,
            name: format!("cni-{i:02}"),
            chains: vec![],
            sets: (0..3)
                .map(|j| NamedSet {
                    name: format!("affinity-{j}-{}", "a".repeat(100)),
                    keys: vec![],
                    userdata: crashing,
                })
                .collect(),
        });
    }
    for family in [Family::Ip, Family::Ip6] {
        nft.tables.push(Table {
            family,
            name: "kube-proxy".into(),
            chains: vec![chain("services", vec![])],
            sets: vec![],
        });
    }
    let legacy = RuleSet {
        tables: owned(false),
    };
    (nft, legacy)
}

/// The biggest status nfguard's own code writes, from the reporter's
/// probe (every cap reached: see [`capped_rule_sets`], [`capped_host_root`])
/// and the controller's conditions and writer inventory over it, with the
/// reporter's failed-probe status and a probe of unreadable rule sets
/// besides, fits the CRD.
#[test]
fn the_biggest_status_nfguard_writes_fits_the_schema() {
    use k8s_openapi::jiff::Timestamp;
    use nfguard::api::{
        KernelModules, ModuleState, NodeNetfilterProfile, NodeNetfilterProfileSpec, XtModule,
    };
    use nfguard::compat::evaluate::ImageResolutions;
    use nfguard::controller::plan::{conditions, inventory};
    use nfguard::facts::{ImageProfile, IptablesFacts, NftVersion, Platform, Version};

    let host = capped_host_root();
    let (iptables, nftables, host_error) = nfguard::node::host_userspace(host.path());
    let (nft, legacy) = capped_rule_sets();
    let modules = KernelModules {
        ip_tables: ModuleState::Absent,
        ip6_tables: ModuleState::Absent,
        nf_tables: ModuleState::Builtin,
        nft_compat: ModuleState::Absent,
        xt: nfguard::node::xt_modules::EXTENSIONS
            .iter()
            .map(|e| XtModule {
                name: e.module.into(),
                state: ModuleState::Absent,
            })
            .collect(),
    };
    let facts = nfguard::node::NodeFacts {
        iptables,
        nftables,
        host_error,
        kernel_release: format!("6.12.0-{}", "k".repeat(57)),
        nf_tables_supported: true,
        ip_tables_supported: true,
        kernel_modules: modules,
        nft: Ok(nft),
        legacy: Ok(legacy),
        bridge: Default::default(),
        ip_forward: Some(true),
    };
    let now: Timestamp = "2026-01-02T03:04:05.123456789Z".parse().unwrap();
    let mut status = nfguard::node::status_from_facts(&facts);
    status.last_probe_time = Some(now.to_string());
    status.probe_interval_seconds = Some(u32::MAX);

    // The caps were reached, or this test proves less than it says.
    let ipt = status.iptables.as_ref().unwrap();
    let host_nft = status.nftables.as_ref().unwrap().host.as_ref().unwrap();
    let hazards = status.hazards.as_deref().unwrap();
    assert!(
        ipt.evidence.len() >= 36 && ipt.conflicts.len() >= 32,
        "{ipt:#?}"
    );
    assert!(host_nft.evidence.len() >= 34, "{host_nft:#?}");
    assert_eq!(status.native_tables.as_ref().unwrap().len(), 64);
    assert_eq!(status.native_features.as_ref().unwrap().len(), 7);
    assert_eq!(
        status.nftables.as_ref().unwrap().crashing_examples.len(),
        16
    );
    assert_eq!(status.nftables.as_ref().unwrap().crashing_tables.len(), 64);
    assert!(hazards.len() >= 49, "{hazards:#?}");

    // The controller's part: conditions over it, and a node of writers.
    status.conditions = Some(conditions::conditions(&status, &[], now, Some(i64::MAX)));
    let platform = Platform::linux_amd64();
    let mut images = ImageResolutions::new();
    let mut pods = Vec::new();
    for p in 0..8 {
        let ns = format!("{p}{}", "n".repeat(62));
        let name = format!("{p}{}", "p".repeat(252));
        let containers: Vec<Value> = (0..4)
            .map(|c| {
                let image = format!(
                    "registry-{p}{c}.example.com/{}/agent:v1.2.3-{}@sha256:{}",
                    "r".repeat(200),
                    "t".repeat(100),
                    "0".repeat(64)
                );
                if c % 2 == 0 {
                    images.insert_error(
                        &image,
                        &platform,
                        format!("GET https://registry-{p}{c}.example.com/v2/: connection refused after 3 attempts (dial tcp 203.0.113.7:443: i/o timeout)"),
                    );
                } else {
                    images.insert_profile(
                        &image,
                        &platform,
                        ImageProfile {
                            image: image.clone(),
                            digest: format!("sha256:{}", "f".repeat(64)),
                            platform: platform.to_string(),
                            iptables: Some(IptablesFacts {
                                version: Some(Version::new(u16::MAX, u16::MAX, u16::MAX)),
                                backend: Some(nfguard::facts::Backend::Wrapper),
                                ..Default::default()
                            }),
                            nftables: Some(nfguard::facts::NftablesFacts {
                                version: Some(NftVersion::new(1, 0, 6, 0)),
                                ..Default::default()
                            }
                            .classified(false)),
                        },
                    );
                }
                serde_json::json!({
                    "name": format!("{c}{}", "c".repeat(62)),
                    "image": image,
                    "securityContext": {"privileged": true},
                })
            })
            .collect();
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": ns, "name": name, "uid": format!("u{p}")},
            "spec": {
                "nodeName": "n",
                "hostNetwork": true,
                "initContainers": containers[..2],
                "containers": containers[2..],
            },
            "status": {"phase": "Running"},
        }))
        .unwrap();
        pods.push(nfguard::projection::PodFacts::of(&pod));
    }
    let inv = inventory::inventory(pods.iter(), Some(&status), &images, &platform);
    assert_eq!(inv.writers.len(), 32);
    status.writers = Some(inv.writers);
    status.newest_writer_version = inv.newest_writer_version;
    status.oldest_reader_version = inv.oldest_reader_version;
    // The controller derives its own hazard from the writers: Healthy again.
    status.conditions = Some(conditions::conditions(&status, &[], now, Some(i64::MAX)));

    let node = "n".repeat(253);
    let profile = |status| {
        let mut p = NodeNetfilterProfile::new(
            &node,
            NodeNetfilterProfileSpec {
                node_name: Some(node.clone()),
            },
        );
        p.status = Some(status);
        serde_json::to_value(p).unwrap()
    };
    let written = profile(status.clone());
    println!(
        "the biggest profile nfguard writes: {} bytes",
        serde_json::to_vec(&written).unwrap().len()
    );
    assert_fits("NodeNetfilterProfile", &written);

    // The reporter's status when its probe dies, over those facts.
    let failed = nfguard::reporter::core::failed_probe_status(
        Some(&status),
        "the probe task panicked: called `Result::unwrap()` on an `Err` value: Os { code: 24, kind: Uncategorized, message: \"Too many open files\" }",
    );
    assert_fits("NodeNetfilterProfile", &profile(failed));

    // Neither rule set readable: every probe error at once.
    let unreadable = nfguard::node::NodeFacts {
        nft: Err(format!("netlink error: {}", "x".repeat(900))),
        legacy: Err(format!("malformed kernel reply: {}", "y".repeat(900))),
        host_error: Some(format!(
            "host iptables probe of /host/{} failed unexpectedly",
            "h".repeat(900)
        )),
        ..facts
    };
    let mut status = nfguard::node::status_from_facts(&unreadable);
    status.conditions = Some(conditions::conditions(&status, &[], now, None));
    assert_fits("NodeNetfilterProfile", &profile(status));
}

/// The largest policy spec the schema admits, with an invalid glob or an
/// invalid selector in it: the controller's status (its `Valid` message
/// quotes the pattern or the key) fits the CRD.
#[test]
fn the_biggest_policy_status_nfguard_writes_fits_the_schema() {
    use nfguard::api::NetfilterPolicy;
    use nfguard::api::bounds::{EXEMPT_IMAGES, IMAGE_PATTERN};
    let now = "2026-01-02T03:04:05Z".parse().unwrap();
    let mut largest_spec = largest(&schema_of("NetfilterPolicy")["properties"]["spec"]);
    for selector in ["namespaceSelector", "exemptionNamespaceSelector"] {
        for e in largest_spec[selector]["matchExpressions"]
            .as_array_mut()
            .unwrap()
        {
            e["operator"] = "NotIn".into();
        }
    }
    let mut broken_glob = largest_spec.clone();
    broken_glob["exemptImages"][EXEMPT_IMAGES - 1] =
        Value::String(format!("{:\"<IMAGE_PATTERN$}", "a["));
    let mut broken_selector = largest_spec.clone();
    broken_selector["namespaceSelector"]["matchExpressions"][15]["operator"] =
        Value::String("x".repeat(16));
    for (spec, reason) in [
        (broken_glob, "InvalidExemptImages"),
        (broken_selector, "InvalidNamespaceSelector"),
    ] {
        let mut policy: NetfilterPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "nfguard.io/v1alpha1",
            "kind": "NetfilterPolicy",
            "metadata": {"name": "p".repeat(253), "generation": i64::MAX},
            "spec": spec,
        }))
        .unwrap();
        assert_fits("NetfilterPolicy", &serde_json::to_value(&policy).unwrap());
        let plan = nfguard::controller::apply::policy_status::plan(&policy, now);
        assert!(!plan.valid);
        let status = plan.status.unwrap();
        assert_eq!(status.conditions.as_ref().unwrap()[0].reason, reason);
        policy.status = Some(status);
        assert_fits("NetfilterPolicy", &serde_json::to_value(&policy).unwrap());
    }
}
