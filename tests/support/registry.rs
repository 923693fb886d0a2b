//! Test support: a real Debian `docker-registry serve CONFIG` on a free
//! 127.0.0.1 port with a throw-away filesystem root. Reusable by any test:
//!
//! ```ignore
//! #[path = "support/registry.rs"] mod registry;
//! let reg = registry::Registry::start();
//! let host = reg.host(); // "127.0.0.1:PORT"
//! ```
//! The registry is killed and its storage removed when the value drops.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Registry {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral loopback port")
}

/// A plain HTTP/1.0 GET over loopback; returns the status code.
pub fn http_status(host: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(host).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    let line = String::from_utf8_lossy(&buf[..n]);
    line.split_whitespace().nth(1)?.parse().ok()
}

impl Registry {
    /// Start a registry; panics with the registry's log if it does not come up.
    pub fn start() -> Self {
        let mut last_log = String::new();
        for _attempt in 0..5 {
            let dir = tempfile::tempdir().expect("temp dir");
            let port = free_port();
            let config = dir.path().join("config.yml");
            let storage = dir.path().join("storage");
            std::fs::create_dir_all(&storage).expect("storage dir");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\n\
                     storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
                     http:\n  addr: 127.0.0.1:{port}\n",
                    storage.display()
                ),
            )
            .expect("write registry config");
            let log = std::fs::File::create(dir.path().join("registry.log")).expect("log file");
            let child = Command::new("docker-registry")
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("dup log"))
                .stderr(log)
                .spawn()
                .expect("run docker-registry (apt package docker-registry)");
            let mut reg = Registry { child, port, dir };
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if http_status(&reg.host(), "/v2/") == Some(200) {
                    return reg;
                }
                if let Ok(Some(_)) = reg.child.try_wait() {
                    break; // port taken between probe and bind: retry
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            last_log = reg.log();
        }
        panic!("docker-registry did not start; last log:\n{last_log}");
    }

    /// `127.0.0.1:PORT`, for image references and `--insecure-registry`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// Everything the registry logged so far (including its access log).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// How many GET requests for blob `digest` the access log shows.
    pub fn blob_gets(&self, digest: &str) -> usize {
        let needle = format!("/blobs/{digest}");
        self.log()
            .lines()
            .filter(|l| l.contains("\"GET ") && l.contains(&needle))
            .count()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
