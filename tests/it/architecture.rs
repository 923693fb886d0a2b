//! The shape docs/architecture.md describes, kept honest: no import circle
//! between the crate's modules, the controller's rooms calling only the
//! rooms below them, no controller folder over 10 files
//! (scripts/check_architecture.py). The checker is also run on a copy of
//! src/ with a circle and a room call added, which it must refuse.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check(script: &Path) -> Output {
    Command::new("python3")
        .arg(script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()))
}

#[test]
fn the_tree_has_no_import_circle_and_the_controller_rooms_keep_their_order() {
    let out = check(&repo().join("scripts/check_architecture.py"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("no circle; controller rooms in order"),
        "{stdout}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

/// Puts `line` above the file's code (what follows `#[cfg(test)]` is not
/// the module's own imports); the copy is never compiled.
fn prepend(path: &Path, line: &str) {
    let s = std::fs::read_to_string(path).expect("read");
    std::fs::write(path, format!("{line}\n{s}")).expect("write");
}

#[test]
fn the_checker_refuses_a_circle_and_a_room_calling_upwards() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&repo().join("src"), &tmp.path().join("src"));
    std::fs::create_dir_all(tmp.path().join("scripts")).expect("mkdir");
    let script = tmp.path().join("scripts/check_architecture.py");
    std::fs::copy(repo().join("scripts/check_architecture.py"), &script).expect("copy");
    let out = check(&script);
    assert!(out.status.success(), "the copy must pass as the tree does");

    // facts::image uses facts::iptables: a use back closes a circle. The
    // pure plan room reaching up into the caches breaks the order.
    let src = tmp.path().join("src");
    prepend(
        &src.join("facts/iptables.rs"),
        "use super::image::ImageProfile;",
    );
    prepend(
        &src.join("controller/plan/taints.rs"),
        "use crate::controller::cache::stores;",
    );
    let out = check(&script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("import circle between facts::image, facts::iptables"),
        "{stdout}"
    );
    assert!(
        stdout.contains("controller room plan calls cache, a room above it"),
        "{stdout}"
    );
}
