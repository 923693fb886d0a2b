//! The binary starts and names itself.
use assert_cmd::Command;

#[test]
fn prints_version() {
    let out = Command::cargo_bin("nfguard")
        .unwrap()
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("nfguard "));
}
