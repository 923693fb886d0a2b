//! The CI definitions are code too: the GitHub workflows pass actionlint
//! (with shellcheck on every `run:` block), every file and test target a
//! step names exists, and both whole-suite runs (scripts/test.sh and the
//! tests workflow) run the `#[ignore]`d privileged tests as root rather than
//! leaving them out. See docs/ci.md.

use serde_yaml::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn workflows() -> Vec<PathBuf> {
    let dir = repo().join(".github/workflows");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    files.sort();
    let names: Vec<_> = files.iter().filter_map(|p| p.file_name()).collect();
    assert!(
        names.contains(&"tests.yml".as_ref()) && names.contains(&"e2e.yml".as_ref()),
        "tests.yml or e2e.yml missing from .github/workflows: {names:?}"
    );
    files
}

fn parse(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("read workflow");
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A tool from `$env`, else from PATH; a missing one fails the test.
fn tool(env: &str, name: &str, how: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "{env}={} is not a file", p.display());
        return p;
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found: set {env} or put it on PATH ({how})"))
}

/// $NFGUARD_ACTIONLINT (scripts/test.sh sets it), else built by
/// scripts/go-tool.sh (needs Go and the Go module proxy; cached).
fn actionlint() -> PathBuf {
    if std::env::var_os("NFGUARD_ACTIONLINT").is_some() {
        return tool("NFGUARD_ACTIONLINT", "actionlint", "");
    }
    let out = Command::new(repo().join("scripts/go-tool.sh"))
        .arg("actionlint")
        .output()
        .expect("run scripts/go-tool.sh");
    assert!(
        out.status.success(),
        "actionlint is needed: set NFGUARD_ACTIONLINT or let scripts/go-tool.sh actionlint build it: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("actionlint")
}

#[test]
fn workflows_pass_actionlint() {
    let actionlint = actionlint();
    // actionlint quietly leaves out its shellcheck pass when shellcheck is
    // missing: name it, so a missing one fails here instead.
    let shellcheck = tool(
        "NFGUARD_SHELLCHECK",
        "shellcheck",
        "apt-get install shellcheck; scripts/test.sh does",
    );
    let out = Command::new(&actionlint)
        .arg("-no-color")
        .arg("-shellcheck")
        .arg(&shellcheck)
        .args(workflows())
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", actionlint.display()));
    assert!(
        out.status.success(),
        "actionlint found problems:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (workflow file, job id, step) for every step of every job.
fn steps(files: &[PathBuf]) -> Vec<(String, String, Value)> {
    let mut all = Vec::new();
    for path in files {
        let doc = parse(path);
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let jobs = doc["jobs"]
            .as_mapping()
            .unwrap_or_else(|| panic!("{file}: no jobs"));
        for (id, job) in jobs {
            let id = id.as_str().unwrap_or_default().to_string();
            let list = job["steps"]
                .as_sequence()
                .unwrap_or_else(|| panic!("{file}: job {id} has no steps"));
            for step in list {
                all.push((file.clone(), id.clone(), step.clone()));
            }
        }
    }
    all
}

/// Top-level folders of this repository whose files a step may name.
const REPO_DIRS: [&str; 9] = [
    "scripts/",
    "e2e/",
    "plugins/",
    "tools/",
    "tests/",
    "docs/",
    "manifests/",
    "charts/",
    ".github/",
];

/// The repository paths and `--test` targets a `run:` block names.
fn named_files(run: &str) -> Vec<String> {
    let words: Vec<&str> = run
        .split(|c: char| c.is_whitespace() || matches!(c, ';' | '|' | '&' | '(' | ')'))
        .map(|w| w.trim_matches(|c| matches!(c, '"' | '\'' | '`' | '\\')))
        .filter(|w| !w.is_empty())
        .collect();
    let mut files = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if *w == "--test" {
            if let Some(name) = words.get(i + 1) {
                files.push(test_target_file(name));
            }
        } else if REPO_DIRS.iter().any(|d| w.starts_with(d)) && !w.contains('$') {
            files.push(w.to_string());
        }
    }
    files
}

/// The file of test target `name`, by Cargo's rule: `tests/NAME/main.rs`
/// (a gathered binary such as `it`), else `tests/NAME.rs`.
fn test_target_file(name: &str) -> String {
    let gathered = format!("tests/{name}/main.rs");
    if repo().join(&gathered).is_file() {
        gathered
    } else {
        format!("tests/{name}.rs")
    }
}

#[test]
fn named_files_finds_paths_and_test_targets() {
    let run = "docker run -v \"$PWD:$PWD\" img \\\n  bash -c 'apt-get update && scripts/fetch-iptables.sh target/x'\n\
               cargo test --test it -- install_crds::; e2e/run.sh|tee \"$out/e2e/log\"\n\
               cargo test --test reporter_bench -- --ignored";
    assert_eq!(
        named_files(run),
        [
            "scripts/fetch-iptables.sh",
            "tests/it/main.rs",
            "e2e/run.sh",
            "tests/reporter_bench.rs"
        ]
    );
}

#[test]
fn workflow_steps_name_files_that_exist() {
    let mut checked = 0;
    let mut missing = Vec::new();
    for (file, job, step) in steps(&workflows()) {
        let mut named = Vec::new();
        if let Some(run) = step["run"].as_str() {
            named.extend(named_files(run));
        }
        if let Some(local) = step["uses"].as_str().and_then(|u| u.strip_prefix("./")) {
            named.push(local.to_string());
        }
        for rel in named {
            checked += 1;
            let path = repo().join(&rel);
            let runnable = !rel.ends_with(".sh") || is_executable(&path);
            if !path.exists() || !runnable {
                missing.push(format!("{file} job {job}: {rel}"));
            }
        }
    }
    assert!(missing.is_empty(), "missing or not executable: {missing:?}");
    assert!(
        checked >= 5,
        "only {checked} file references found: parsing broke?"
    );
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

/// `run:` blocks of tests.yml that run cargo-nextest.
fn nextest_runs(doc: &Value) -> Vec<String> {
    let mut runs = Vec::new();
    for job in doc["jobs"]
        .as_mapping()
        .into_iter()
        .flat_map(|m| m.values())
    {
        for step in job["steps"].as_sequence().into_iter().flatten() {
            if let Some(run) = step["run"]
                .as_str()
                .filter(|r| r.contains("cargo nextest run"))
            {
                runs.push(run.to_string());
            }
        }
    }
    runs
}

#[test]
fn whole_suite_runs_include_the_ignored_privileged_tests_as_root() {
    let script = read("scripts/test.sh");
    assert!(
        script.contains("\"$(id -u)\" != 0"),
        "scripts/test.sh must insist on root"
    );
    assert!(script.contains("export NFGUARD_REQUIRE_PRIVILEGED=1"));
    let nextest: Vec<&str> = script
        .lines()
        .filter(|l| l.starts_with("cargo nextest run"))
        .collect();
    assert!(
        !nextest.is_empty() && nextest.iter().all(|l| l.contains("--run-ignored all")),
        "scripts/test.sh must run nextest with --run-ignored all: {nextest:?}"
    );

    let doc = parse(&repo().join(".github/workflows/tests.yml"));
    let runs = nextest_runs(&doc);
    assert!(!runs.is_empty(), "tests.yml runs no cargo nextest");
    for run in &runs {
        assert!(run.contains("--run-ignored all"), "{run}");
        assert!(
            run.contains("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=\"sudo -E"),
            "the tests must run as root (sudo target runner): {run}"
        );
    }
    let required = doc["jobs"]
        .as_mapping()
        .into_iter()
        .flat_map(|m| m.values())
        .all(|job| job["env"]["NFGUARD_REQUIRE_PRIVILEGED"].as_str() == Some("1"));
    assert!(
        required,
        "every tests.yml job sets NFGUARD_REQUIRE_PRIVILEGED=1"
    );
}

/// A bare `#[ignore]` hides why a test did not run; every one says why.
#[test]
fn every_ignored_test_says_why() {
    let mut bare = Vec::new();
    let mut seen = 0;
    let mut stack = vec![
        repo().join("tests"),
        repo().join("src"),
        repo().join("benches"),
    ];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read source");
                for (n, line) in text.lines().enumerate() {
                    let line = line.trim();
                    if line.starts_with("#[ignore") {
                        seen += 1;
                        if !line.starts_with("#[ignore = \"") {
                            bare.push(format!("{}:{}", path.display(), n + 1));
                        }
                    }
                }
            }
        }
    }
    assert!(bare.is_empty(), "#[ignore] without a reason: {bare:?}");
    assert!(seen > 0, "no ignored test found: the scan is broken");
}

/// Shell words of one command line: whitespace outside quotes separates,
/// quotes stay in the word (enough for the workflows' `docker run` lines).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                continue;
            }
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
        word.push(c);
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// A workflow step's `docker run`: where it runs, its options (flag, value)
/// and the command after the image, as written.
struct ContainerRun {
    at: String,
    options: Vec<(String, Option<String>)>,
    command: String,
}

/// docker run's options that take a value (the workflows use these).
const DOCKER_VALUE_FLAGS: [&str; 8] = [
    "-v",
    "--volume",
    "-w",
    "--workdir",
    "-u",
    "--user",
    "-e",
    "--env",
];

fn container_runs() -> Vec<ContainerRun> {
    let mut all = Vec::new();
    for (file, job, step) in steps(&workflows()) {
        let Some(run) = step["run"].as_str() else {
            continue;
        };
        let joined = run.replace("\\\n", " ");
        for line in joined.lines() {
            let words = shell_words(line);
            if words.len() < 2 || words[0] != "docker" || words[1] != "run" {
                continue;
            }
            let mut options = Vec::new();
            let mut rest = words[2..].iter();
            let image = loop {
                let w = rest
                    .next()
                    .unwrap_or_else(|| panic!("{file} {job}: no image in {line}"));
                if !w.starts_with('-') {
                    break w;
                }
                let value = DOCKER_VALUE_FLAGS
                    .contains(&w.as_str())
                    .then(|| rest.next().cloned().expect("flag value"));
                options.push((w.clone(), value));
            };
            let name = step["name"].as_str().unwrap_or("?");
            all.push(ContainerRun {
                at: format!("{file} job {job} step '{name}' ({image})"),
                options,
                command: rest.cloned().collect::<Vec<_>>().join(" "),
            });
        }
    }
    all
}

/// Issue #22: a container that writes into the mounted checkout as root left
/// a root-owned target/ for the next step's `cargo build` (the runner user).
/// Every `docker run` in the workflows mounts the checkout at its own path
/// and runs as the runner's user.
#[test]
fn containers_write_the_checkout_as_the_runner_user() {
    let runs = container_runs();
    assert!(
        runs.len() >= 2,
        "only {} docker run lines found in the workflows: parsing broke?",
        runs.len()
    );
    for r in &runs {
        let has = |flag: &[&str], value: &str| {
            r.options
                .iter()
                .any(|(f, v)| flag.contains(&f.as_str()) && v.as_deref() == Some(value))
        };
        assert!(
            has(&["-u", "--user"], "\"$(id -u):$(id -g)\""),
            "{}: runs as the image's user (root): add --user \"$(id -u):$(id -g)\"",
            r.at
        );
        assert!(
            has(&["-v", "--volume"], "\"$PWD:$PWD\"") && has(&["-w", "--workdir"], "\"$PWD\""),
            "{}: mount the checkout at its own path and work there (-v \"$PWD:$PWD\" -w \"$PWD\")",
            r.at
        );
    }
}

/// The workflows' container commands, run here as nobody in a copy of the
/// checkout's scripts: they must succeed without root and leave nothing in
/// the copy that nobody does not own. The iptables releases are seeded from
/// $NFGUARD_FIXTURES (no download: traffic stays on this machine), so this
/// runs the script's own path handling and checks, not apt.
#[test]
#[ignore = "privileged: setpriv to nobody needs root; NFGUARD_FIXTURES must hold the fetched releases"]
fn container_commands_work_as_a_non_root_user() {
    use std::os::unix::fs::MetadataExt;
    const NOBODY: u32 = 65534;
    let fixtures = std::env::var_os("NFGUARD_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/fixtures"))
        .join("iptables");
    assert!(
        fixtures.join("1.8.7/.complete").is_file(),
        "no fetched iptables releases in {} (scripts/fetch-iptables.sh)",
        fixtures.display()
    );
    let runs = container_runs();
    assert!(!runs.is_empty(), "no docker run in the workflows");
    for r in &runs {
        let dir = tempfile::tempdir().expect("temp dir");
        let copy = dir.path().join("checkout");
        std::fs::create_dir_all(copy.join("target/fixtures")).expect("mkdir");
        let cp = |from: &Path, to: &Path| {
            let st = Command::new("cp")
                .arg("-a")
                .arg(from)
                .arg(to)
                .status()
                .expect("cp");
            assert!(st.success(), "cp -a {} {}", from.display(), to.display());
        };
        cp(&repo().join("scripts"), &copy);
        cp(&fixtures, &copy.join("target/fixtures"));
        let st = Command::new("chown")
            .args(["-R", &format!("{NOBODY}:{NOBODY}")])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(st.success());
        let out = Command::new("setpriv")
            .args([
                &format!("--reuid={NOBODY}"),
                &format!("--regid={NOBODY}"),
                "--clear-groups",
                "bash",
                "-euc",
                &r.command,
            ])
            .current_dir(&copy)
            .env("PWD", &copy)
            .output()
            .expect("setpriv");
        assert!(
            out.status.success(),
            "{}: `{}` as nobody failed: {}{}",
            r.at,
            r.command,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut stack = vec![copy.clone()];
        let mut seen = 0;
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("read dir").flatten() {
                let m = std::fs::symlink_metadata(e.path()).expect("stat");
                assert_eq!(
                    m.uid(),
                    NOBODY,
                    "{}: {} is not the runner's",
                    r.at,
                    e.path().display()
                );
                seen += 1;
                if m.is_dir() {
                    stack.push(e.path());
                }
            }
        }
        assert!(seen > 10, "{}: the copy holds only {seen} entries", r.at);
    }
}

#[test]
fn shell_words_keep_quoted_spaces() {
    assert_eq!(
        shell_words(r#"docker run --user "$(id -u):$(id -g)" -v "$PWD:$PWD" img sh -c 'a b'"#),
        [
            "docker",
            "run",
            "--user",
            "\"$(id -u):$(id -g)\"",
            "-v",
            "\"$PWD:$PWD\"",
            "img",
            "sh",
            "-c",
            "'a b'"
        ]
    );
}
