//! Kernel release, bridge netfilter and forwarding sysctls of the current
//! network namespace (procfs/sysfs roots passed in so tests can point elsewhere).

use crate::api::BridgeFacts;
use std::path::Path;

/// `uname -r`.
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain data; uname fills it or fails.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a live utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A 0/1 sysctl; None when the file is missing or not a number.
pub fn read_flag(path: &Path) -> Option<bool> {
    let s = std::fs::read_to_string(path).ok()?;
    let n: i64 = s.trim().parse().ok()?;
    Some(n != 0)
}

/// br_netfilter is present when its sysctls exist in this namespace (they
/// exist only while the module is loaded, or when it is built in) or sysfs
/// lists the module. Missing sysctls read as "not calling iptables".
pub fn bridge(proc_dir: &Path, sys_dir: &Path) -> BridgeFacts {
    let bridge = proc_dir.join("sys/net/bridge");
    let call_iptables = read_flag(&bridge.join("bridge-nf-call-iptables"));
    let call_ip6tables = read_flag(&bridge.join("bridge-nf-call-ip6tables"));
    let module = sys_dir.join("module/br_netfilter").exists();
    BridgeFacts {
        br_netfilter: module || call_iptables.is_some(),
        call_iptables: call_iptables.unwrap_or(false),
        call_ip6tables: call_ip6tables.unwrap_or(false),
    }
}

pub fn ip_forward(proc_dir: &Path) -> Option<bool> {
    read_flag(&proc_dir.join("sys/net/ipv4/ip_forward"))
}
