//! The sandbox child's entry: `nfguard __nfguard-image-parser MEMORY CPU
//! ENTRIES FILE RETAINED` (bytes, seconds, then `LayerLimits`), started by
//! `Session` with an empty environment and only its pipes. It confines
//! itself before reading anything, then serves until its parent hangs up.

use super::{confine, frame, refusal::Refusal, worker};
use crate::rootfs::{LayerLimits, MemoryBudget};
use std::process::ExitCode;

/// The hidden first argument that makes `nfguard` the parser child.
pub const ARG: &str = "__nfguard-image-parser";

/// The child's limits, as `Session` passes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildLimits {
    pub memory_bytes: u64,
    pub cpu_seconds: u64,
    pub max_entries: u64,
    pub max_file_bytes: u64,
    pub max_retained_bytes: u64,
}

impl ChildLimits {
    pub fn to_args(&self) -> Vec<String> {
        [
            self.memory_bytes,
            self.cpu_seconds,
            self.max_entries,
            self.max_file_bytes,
            self.max_retained_bytes,
        ]
        .iter()
        .map(u64::to_string)
        .collect()
    }

    fn parse(args: &[String]) -> Option<Self> {
        let n: Vec<u64> = args.iter().map(|a| a.parse().ok()).collect::<Option<_>>()?;
        match n[..] {
            [
                memory_bytes,
                cpu_seconds,
                max_entries,
                max_file_bytes,
                max_retained_bytes,
            ] => Some(ChildLimits {
                memory_bytes,
                cpu_seconds,
                max_entries,
                max_file_bytes,
                max_retained_bytes,
            }),
            _ => None,
        }
    }
}

/// Run as the parser child when invoked as one (the first thing `main` does).
pub fn main_if_invoked() -> Option<ExitCode> {
    let mut args = std::env::args();
    if args.nth(1).as_deref() != Some(ARG) {
        return None;
    }
    let rest: Vec<String> = args.collect();
    Some(run(&rest))
}

fn run(args: &[String]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let refuse = |out: &mut std::io::StdoutLock, text: String| {
        let _ = frame::write(out, frame::REFUSED, &Refusal::other(text).encode());
        ExitCode::from(3)
    };
    let Some(limits) = ChildLimits::parse(args) else {
        return refuse(
            &mut stdout,
            "the image parser was started with bad arguments".into(),
        );
    };
    if let Err(e) = confine::confine(limits.memory_bytes, limits.cpu_seconds) {
        return refuse(
            &mut stdout,
            format!("the image parser cannot confine itself: {e}"),
        );
    }
    let layer_limits = LayerLimits {
        max_entries: limits.max_entries,
        max_file_bytes: limits.max_file_bytes,
        max_retained_bytes: limits.max_retained_bytes,
        // Replaced by grants from the parent (`worker::serve`).
        budget: MemoryBudget::new(0),
    };
    drop(stdout);
    use std::os::fd::FromRawFd;
    // SAFETY: the child owns its stdin and stdout and nothing else uses
    // them from here on (std's buffered handles would only add copies).
    let (input, output) = unsafe { (std::fs::File::from_raw_fd(0), std::fs::File::from_raw_fd(1)) };
    let link = worker::Link::new(input, output);
    match worker::serve(link, layer_limits, true) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_pass_through_argv() {
        let l = ChildLimits {
            memory_bytes: 1,
            cpu_seconds: 2,
            max_entries: 3,
            max_file_bytes: 4,
            max_retained_bytes: 5,
        };
        assert_eq!(ChildLimits::parse(&l.to_args()), Some(l));
        assert_eq!(ChildLimits::parse(&["1".into()]), None);
        assert_eq!(ChildLimits::parse(&vec!["x".to_string(); 5]), None);
    }
}
