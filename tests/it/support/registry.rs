//! Test support: a real Debian `docker-registry serve CONFIG` on a free
//! 127.0.0.1 port with a throw-away filesystem root. Reusable by any test:
//!
//! ```ignore
//! use crate::support::registry;
//! let reg = registry::Registry::start();
//! let host = reg.host(); // "127.0.0.1:PORT"
//! ```
//! The registry is killed and its storage removed when the value drops.
// The benches include this file too (benches/image_inspect.rs,
// benches/webhook_admission.rs) and use a part of it.
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

fn write_config(dir: &std::path::Path, port: u16, htpasswd: Option<&std::path::Path>) -> PathBuf {
    let config = dir.join("config.yml");
    let storage = dir.join("storage");
    std::fs::create_dir_all(&storage).expect("storage dir");
    let auth = htpasswd
        .map(|p| {
            format!(
                "auth:\n  htpasswd:\n    realm: nfguard-test\n    path: {}\n",
                p.display()
            )
        })
        .unwrap_or_default();
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: 127.0.0.1:{port}\n{auth}",
            storage.display()
        ),
    )
    .expect("write registry config");
    config
}

fn spawn(dir: &std::path::Path, config: &std::path::Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("registry.log"))
        .expect("log file");
    Command::new("docker-registry")
        .arg("serve")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup log"))
        .stderr(log)
        .spawn()
        .expect("run docker-registry (apt package docker-registry)")
}

/// A bcrypt htpasswd line, hashed by the system's libcrypt (libxcrypt).
pub fn htpasswd_line(user: &str, password: &str) -> String {
    use std::ffi::{CStr, CString};
    #[link(name = "crypt")]
    unsafe extern "C" {
        fn crypt(key: *const libc::c_char, salt: *const libc::c_char) -> *mut libc::c_char;
    }
    let key = CString::new(password).expect("password without NUL");
    let salt = CString::new("$2b$05$nfguardtestsaltnfguard").expect("salt");
    let hash = unsafe { crypt(key.as_ptr(), salt.as_ptr()) };
    assert!(!hash.is_null(), "libcrypt has no bcrypt");
    let hash = unsafe { CStr::from_ptr(hash) }
        .to_string_lossy()
        .into_owned();
    assert!(hash.starts_with("$2b$"), "libcrypt bcrypt failed: {hash}");
    format!("{user}:{hash}\n")
}

impl Registry {
    /// Start a registry; panics with the registry's log if it does not come up.
    pub fn start() -> Self {
        let mut last_log = String::new();
        for _attempt in 0..5 {
            let dir = tempfile::tempdir().expect("temp dir");
            let port = free_port();
            let config = write_config(dir.path(), port, None);
            let child = spawn(dir.path(), &config);
            let mut reg = Registry { child, port, dir };
            if reg.wait_ready(200) {
                return reg;
            }
            last_log = reg.log();
        }
        panic!("docker-registry did not start; last log:\n{last_log}");
    }

    fn wait_ready(&mut self, status: u16) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if http_status(&self.host(), "/v2/") == Some(status) {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return false; // e.g. the port was taken between probe and bind
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Restart on the same port and storage, now demanding HTTP basic auth
    /// (htpasswd) for `user`/`password`. Push images before calling this.
    pub fn restart_with_basic_auth(&mut self, user: &str, password: &str) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let htpasswd = self.dir.path().join("htpasswd");
        std::fs::write(&htpasswd, htpasswd_line(user, password)).expect("write htpasswd");
        let config = write_config(self.dir.path(), self.port, Some(&htpasswd));
        for _ in 0..20 {
            self.child = spawn(self.dir.path(), &config);
            if self.wait_ready(401) {
                return;
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("docker-registry with auth did not start:\n{}", self.log());
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
