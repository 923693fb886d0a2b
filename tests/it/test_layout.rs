//! The shape of tests/: integration tests are modules of one binary
//! (tests/it/main.rs). Cargo makes every top-level `tests/*.rs` and
//! `tests/*/main.rs` a test binary of its own that links the whole crate and
//! its dependencies again (45 of them were most of the dev build), so a new
//! one fails here unless it is listed with its reason; a file in tests/it
//! without its `mod` line would never be compiled, so that fails here too.
//! Where a new test goes: docs/ci.md.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The test binaries, and why each is one.
const TEST_BINARIES: &[(&str, &str)] = &[
    ("it", "the integration tests, gathered (this binary)"),
    (
        "reporter_bench",
        "the reporter benchmark: its own harness run (`--test-threads 1`, a release binary in \
         NFGUARD_BENCH_BIN) by scripts/bench-reporter.sh; .config/nextest.toml keeps it out of \
         whole-suite runs",
    ),
];

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn entries(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut all: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| {
            let e = e.expect("dir entry");
            (e.file_name().to_string_lossy().into_owned(), e.path())
        })
        .collect();
    all.sort();
    all
}

/// The test binaries Cargo finds in `dir` (its auto-discovery rule):
/// `NAME.rs` and `NAME/main.rs`.
fn test_binaries(dir: &Path) -> Vec<String> {
    entries(dir)
        .into_iter()
        .filter_map(|(name, path)| {
            if path.is_dir() {
                path.join("main.rs").is_file().then_some(name)
            } else {
                name.strip_suffix(".rs").map(str::to_string)
            }
        })
        .collect()
}

/// Binaries not in [`TEST_BINARIES`].
fn unlisted(binaries: &[String]) -> Vec<String> {
    binaries
        .iter()
        .filter(|b| !TEST_BINARIES.iter().any(|(name, _)| name == b))
        .cloned()
        .collect()
}

/// The modules a gathered binary's directory holds: `NAME.rs` (not
/// main.rs) and `NAME/mod.rs`.
fn module_files(dir: &Path) -> BTreeSet<String> {
    entries(dir)
        .into_iter()
        .filter_map(|(name, path)| {
            if path.is_dir() {
                path.join("mod.rs").is_file().then_some(name)
            } else if name == "main.rs" {
                None
            } else {
                name.strip_suffix(".rs").map(str::to_string)
            }
        })
        .collect()
}

/// The `mod NAME;` lines of a crate root.
fn declared_modules(main_rs: &str) -> BTreeSet<String> {
    main_rs
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_test_binary_is_the_gathered_one_or_listed_with_its_reason() {
    let found = test_binaries(&tests_dir());
    let extra = unlisted(&found);
    assert!(
        extra.is_empty(),
        "tests/ holds test binaries of their own: {extra:?}. Each links the whole crate again: \
         make it a module of tests/it (a file there and a `mod` line in tests/it/main.rs), or \
         list it in TEST_BINARIES (tests/it/test_layout.rs) with the reason it needs its own \
         binary (docs/ci.md)"
    );
    for (name, _) in TEST_BINARIES {
        assert!(
            found.iter().any(|f| f == name),
            "TEST_BINARIES names {name}, which tests/ no longer holds: {found:?}"
        );
    }
}

#[test]
fn a_new_top_level_test_file_is_found_as_a_binary_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("it")).unwrap();
    std::fs::write(dir.path().join("it/main.rs"), "").unwrap();
    std::fs::create_dir_all(dir.path().join("fixtures")).unwrap();
    std::fs::create_dir_all(dir.path().join("new_dir_binary")).unwrap();
    std::fs::write(dir.path().join("new_dir_binary/main.rs"), "").unwrap();
    for f in ["reporter_bench.rs", "webhook_new.rs", "notes.md"] {
        std::fs::write(dir.path().join(f), "").unwrap();
    }
    let found = test_binaries(dir.path());
    assert_eq!(
        found,
        ["it", "new_dir_binary", "reporter_bench", "webhook_new"]
    );
    assert_eq!(unlisted(&found), ["new_dir_binary", "webhook_new"]);
}

#[test]
fn every_file_of_the_gathered_binary_is_a_declared_module() {
    let dir = tests_dir().join("it");
    let main_rs = std::fs::read_to_string(dir.join("main.rs")).expect("read tests/it/main.rs");
    let declared = declared_modules(&main_rs);
    let files = module_files(&dir);
    let undeclared: Vec<_> = files.difference(&declared).collect();
    let missing: Vec<_> = declared.difference(&files).collect();
    assert!(
        undeclared.is_empty(),
        "files in tests/it without a `mod` line in tests/it/main.rs (never compiled, never run): \
         {undeclared:?}"
    );
    assert!(
        missing.is_empty(),
        "modules of tests/it/main.rs this test cannot find as files: {missing:?}"
    );
    assert!(
        declared.len() > 40,
        "only {} modules declared: parsing broke?",
        declared.len()
    );
}

#[test]
fn declared_modules_reads_mod_lines_only() {
    let main_rs = "//! mod not_this;\n// Helpers.\nmod support;\n\nmod webhook_tls;\nuse x;\n";
    assert_eq!(
        declared_modules(main_rs),
        BTreeSet::from(["support".to_string(), "webhook_tls".to_string()])
    );
}
