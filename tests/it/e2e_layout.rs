//! The e2e's layout (docs/e2e.md, "How the scenarios are written"): a
//! harness of under 300 lines, one file per scenario of at most 400 lines
//! whose header declares what the harness reads, every scenario in the run
//! order and in docs/e2e.md's table. The harness itself counts what ran
//! (e2e/scenarios.sh); this keeps a new scenario from being lost before it
//! ever runs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `NAME="value"` or `NAME=value` at the start of a line.
fn declared<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let v = l.strip_prefix(name)?.strip_prefix('=')?;
        Some(v.trim_matches('"'))
    })
}

fn scenarios() -> Vec<(u32, PathBuf)> {
    let mut out: Vec<(u32, PathBuf)> = std::fs::read_dir(repo().join("e2e/scenarios"))
        .expect("e2e/scenarios")
        .map(|e| e.expect("entry").path())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let ok = name.len() > 6
                && name.as_bytes()[..2].iter().all(u8::is_ascii_digit)
                && name.as_bytes()[2] == b'-'
                && name.ends_with(".sh")
                && name[3..name.len() - 3]
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            assert!(ok, "e2e/scenarios/{name} is not NN-what-it-proves.sh");
            (name[..2].parse().unwrap(), p)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn the_harness_is_small_and_runs_every_scenario_file() {
    let harness = read(&repo().join("e2e/scenarios.sh"));
    let lines = harness.lines().count();
    assert!(
        lines < 300,
        "e2e/scenarios.sh has {lines} lines: a harness stays under 300"
    );
    let order: Vec<u32> = declared(&harness, "RUN_ORDER")
        .expect("RUN_ORDER in e2e/scenarios.sh")
        .split_whitespace()
        .map(|n| n.parse().expect("a number"))
        .collect();
    let unique: BTreeSet<u32> = order.iter().copied().collect();
    assert_eq!(
        unique.len(),
        order.len(),
        "RUN_ORDER names a scenario twice: {order:?}"
    );
    let files: BTreeSet<u32> = scenarios().iter().map(|(n, _)| *n).collect();
    assert_eq!(
        unique, files,
        "RUN_ORDER and the files of e2e/scenarios/ differ"
    );
    let doc = read(&repo().join("docs/e2e.md"));
    for n in &files {
        assert!(
            doc.contains(&format!("\n| {n} | ")),
            "docs/e2e.md's table of scenarios has no row for scenario {n}"
        );
    }
}

#[test]
fn every_scenario_declares_what_the_harness_reads() {
    const NEEDS: &[&str] = &["nftables-node", "private-registry", "prometheus"];
    for (n, path) in scenarios() {
        let text = read(&path);
        let name = path.display();
        let lines = text.lines().count();
        assert!(
            lines <= 400,
            "{name}: {lines} lines, a scenario file stays within 400"
        );
        assert!(
            text.contains(&format!("\n# Scenario {n}: ")),
            "{name}: its header does not start with '# Scenario {n}: ...'"
        );
        for part in ["\n# Runs on: ", "\n# Starts from: ", "\n# Undoes"] {
            assert!(
                text.contains(part),
                "{name}: no '{}' line in its header",
                part.trim()
            );
        }
        let title = declared(&text, "SCENARIO_TITLE").unwrap_or("");
        assert!(!title.is_empty(), "{name}: no SCENARIO_TITLE");
        let providers = declared(&text, "SCENARIO_PROVIDERS").unwrap_or("");
        assert!(
            !providers.is_empty()
                && providers
                    .split_whitespace()
                    .all(|p| p == "kind" || p == "local"),
            "{name}: SCENARIO_PROVIDERS '{providers}' (kind, local)"
        );
        let needs = declared(&text, "SCENARIO_NEEDS").expect("SCENARIO_NEEDS");
        for need in needs.split_whitespace() {
            assert!(
                NEEDS.contains(&need),
                "{name}: unknown need {need} ({NEEDS:?})"
            );
        }
        let skips = declared(&text, "SCENARIO_MAY_SKIP_ON").expect("SCENARIO_MAY_SKIP_ON");
        assert!(
            !skips.split_whitespace().any(|p| p == "local"),
            "{name}: the local provider provides everything: nothing may be skipped there"
        );
        let run = declared(&text, "SCENARIO_RUN").unwrap_or("");
        assert!(
            text.contains(&format!("\n{run}() {{")),
            "{name}: SCENARIO_RUN={run} is not a function of the file"
        );
        for line in text.lines() {
            if let Some((f, _)) = line.split_once("() {") {
                let own = f.starts_with(&format!("s{n}_"));
                assert!(
                    own && !f.contains(' '),
                    "{name}: helper {f} is not s{n}_*: a helper other scenarios need goes to e2e/lib/"
                );
            }
        }
    }
}
