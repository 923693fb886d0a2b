//! `nfguard controller` refuses bad configuration with a clear one-line
//! error and exit code 2, before touching any cluster.

use assert_cmd::Command;
use predicates::str::contains;

#[test]
fn missing_kubeconfig_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-kubeconfig");
    Command::cargo_bin("nfguard")
        .unwrap()
        .args([
            "controller",
            "--metrics-listen",
            "127.0.0.1:0",
            "--kubeconfig",
        ])
        .arg(&missing)
        .timeout(std::time::Duration::from_secs(30))
        .assert()
        .code(2)
        .stderr(contains("reading kubeconfig"));
}

#[test]
fn renew_deadline_must_be_shorter_than_the_lease() {
    Command::cargo_bin("nfguard")
        .unwrap()
        .args(["controller", "--metrics-listen", "127.0.0.1:0"])
        .args(["--lease-duration", "10", "--renew-deadline", "10"])
        .timeout(std::time::Duration::from_secs(30))
        .assert()
        .code(2)
        .stderr(contains(
            "--renew-deadline (10) must be shorter than --lease-duration (10)",
        ));
}
