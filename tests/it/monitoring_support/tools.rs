//! promtool and kustomize: built from the Go module proxy by
//! scripts/go-tool.sh (scripts/test.sh exports NFGUARD_PROMTOOL and
//! NFGUARD_KUSTOMIZE). A missing tool fails the test, it never skips it.

use std::path::PathBuf;
use std::process::{Command, Output};

fn find(env: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "{env}={} is not a file", p.display());
        return p;
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    on_path.unwrap_or_else(|| {
        panic!(
            "{name} not found: set {env} or put it on PATH, e.g. \
             export {env}=\"$(scripts/go-tool.sh {name})/{name}\" (scripts/test.sh does)"
        )
    })
}

pub fn promtool() -> PathBuf {
    find("NFGUARD_PROMTOOL", "promtool")
}

pub fn kustomize() -> PathBuf {
    find("NFGUARD_KUSTOMIZE", "kustomize")
}

/// Run and return the output; the caller judges the exit status.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
