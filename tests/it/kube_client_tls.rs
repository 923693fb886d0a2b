//! Every kube client nfguard builds speaks TLS through rustls. kube-client
//! and reqwest enable rustls with two crypto backends, so without a process
//! default the first client panicked (found on the first real cluster; the
//! mock client never builds TLS). Here the binary talks to a loopback
//! listener that hangs up: it must fail with a one-line error, not panic.

use assert_cmd::Command;
use predicates::prelude::*;
use std::io::Write;
use std::net::TcpListener;

#[test]
fn cluster_mode_builds_a_tls_client_and_fails_cleanly() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn); // hang up before the TLS handshake
        }
    });
    let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let ca_pem = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca.cert.pem());
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {ca_pem}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let manifest = dir.path().join("pod.yaml");
    let mut f = std::fs::File::create(&manifest).unwrap();
    writeln!(
        f,
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: default}}\nspec:\n  hostNetwork: true\n  containers:\n  - name: c\n    image: 127.0.0.1:1/none:v1\n    securityContext: {{capabilities: {{add: [NET_ADMIN]}}}}"
    )
    .unwrap();
    Command::cargo_bin("nfguard")
        .unwrap()
        .args(["check", "--timeout", "5", "-f"])
        .arg(&manifest)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("panicked").not())
        .stderr(predicate::str::contains("CryptoProvider").not());
}
