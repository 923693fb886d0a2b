//! What a compromised parser would try first, tried on purpose: the sandbox
//! self-check (`Session::probe`) asks the child to open the ServiceAccount
//! token, connect out, start a program, reach its parent, map executable
//! memory and write a file; each must fail. The webhook and controller run
//! it at start; the tests run it with a listener that records connections.
//! Then, on request, it exceeds a limit so the parent can see it killed.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    /// A file the parser must not read (the ServiceAccount token).
    pub secret_file: String,
    /// `IP:PORT` the parser must not reach.
    pub connect_to: String,
    /// The process it must not signal or trace; 0: its parent.
    #[serde(default)]
    pub other_pid: i32,
    /// After answering: allocate and touch this many bytes (past the memory limit).
    #[serde(default)]
    pub then_allocate: u64,
    /// After answering: spin on the CPU (past the CPU limit).
    #[serde(default)]
    pub then_spin: bool,
    /// After answering: block forever (the parent's timeout must end it).
    #[serde(default)]
    pub then_hang: bool,
}

/// Each attempt and what came of it: "refused (...)" or what it got.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub read_secret: String,
    pub connect: String,
    pub spawn: String,
    pub signal_parent: String,
    pub trace_parent: String,
    pub executable_memory: String,
    pub write_file: String,
}

impl Report {
    /// Attempts that were not refused (empty: the sandbox holds).
    pub fn escapes(&self) -> Vec<String> {
        [
            ("read the secret file", &self.read_secret),
            ("connect", &self.connect),
            ("spawn a program", &self.spawn),
            ("signal its parent", &self.signal_parent),
            ("trace its parent", &self.trace_parent),
            ("map executable memory", &self.executable_memory),
            ("write a file", &self.write_file),
        ]
        .into_iter()
        .filter(|(_, r)| !r.starts_with("refused"))
        .map(|(what, r)| format!("{what}: {r}"))
        .collect()
    }
}

fn outcome(ret: i64, ok: impl FnOnce() -> String) -> String {
    if ret < 0 {
        format!("refused ({})", std::io::Error::last_os_error())
    } else {
        ok()
    }
}

/// Try everything a parser must not be able to do.
pub fn attempt(p: &Probe) -> Report {
    use std::io::Read;
    let read_secret = match std::fs::File::open(&p.secret_file) {
        Ok(mut f) => {
            let mut s = Vec::new();
            let n = f.read_to_end(&mut s).map(|_| s.len()).unwrap_or(0);
            format!("read {n} bytes")
        }
        Err(e) => format!("refused ({e})"),
    };
    let connect = match p.connect_to.parse::<std::net::SocketAddr>() {
        Ok(addr) => match std::net::TcpStream::connect(addr) {
            Ok(_) => format!("connected to {addr}"),
            Err(e) => format!("refused ({e})"),
        },
        Err(_) => "refused (no address to try)".into(),
    };
    let spawn = match std::process::Command::new("/bin/true").status() {
        Ok(s) => format!("ran /bin/true ({s})"),
        Err(e) => format!("refused ({e})"),
    };
    // SAFETY: plain system calls on integers; none touches our memory.
    let parent = match p.other_pid {
        0 => unsafe { libc::getppid() },
        pid => pid,
    };
    let signal_parent = outcome(unsafe { libc::kill(parent, 0) } as i64, || {
        format!("may signal pid {parent}")
    });
    let trace_parent = outcome(
        unsafe { libc::ptrace(libc::PTRACE_ATTACH, parent, 0, 0) },
        || {
            // Let go at once: a broken sandbox must fail its check, not
            // leave the process it reached stopped (the webhook, a test).
            unsafe {
                libc::waitpid(parent, std::ptr::null_mut(), libc::__WALL);
                libc::ptrace(libc::PTRACE_DETACH, parent, 0, 0);
            }
            format!("attached to pid {parent}")
        },
    );
    let executable_memory = {
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if m == libc::MAP_FAILED {
            format!("refused ({})", std::io::Error::last_os_error())
        } else {
            "mapped a writable executable page".into()
        }
    };
    let write_file = match std::fs::write("/tmp/nfguard-parser-escape", b"x") {
        Ok(()) => "wrote /tmp/nfguard-parser-escape".into(),
        Err(e) => format!("refused ({e})"),
    };
    Report {
        read_secret,
        connect,
        spawn,
        signal_parent,
        trace_parent,
        executable_memory,
        write_file,
    }
}

/// The limits' turn, after the report went out: none of these returns
/// while the limits hold.
pub fn then_exceed(p: &Probe) {
    if p.then_allocate > 0 {
        let mut held: Vec<Vec<u8>> = Vec::new();
        let mut total = 0u64;
        while total < p.then_allocate {
            held.push(vec![1u8; 1 << 20]);
            total += 1 << 20;
        }
        std::hint::black_box(&held);
    }
    if p.then_spin {
        let mut x = 0u64;
        loop {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
    if p.then_hang {
        loop {
            std::thread::park();
        }
    }
}
