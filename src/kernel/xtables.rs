//! x_tables (iptables-legacy), read with getsockopt(IPT_SO_GET_INFO /
//! IPT_SO_GET_ENTRIES) and the IPv6 equivalents.
//!
//! Asking the kernel about a table that does not exist *creates* it (the
//! table module's init runs on first lookup), which would make the node look
//! — and become — mixed-backend. So only the tables already listed in
//! `/proc/net/ip{,6}_tables_names` are ever asked about.

use super::{Chain, Expr, Family, KernelError, MAX_RULES, Rule, RuleSet, Table, Verdict};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SO_GET_INFO: i32 = 64; // IPT_SO_GET_INFO == IP6T_SO_GET_INFO
const SO_GET_ENTRIES: i32 = 65;
const TABLE_MAXNAMELEN: usize = 32;
const GETINFO_LEN: usize = 84; // name[32], valid_hooks, hook_entry[5], underflow[5], num_entries, size
const GET_ENTRIES_HDR: usize = 40; // name[32], size, pad to the 8-byte aligned entry table
/// A legacy table blob larger than this is refused (bounded memory).
const MAX_BLOB: usize = 512 * 1024 * 1024;
const HOOKS: [&str; 5] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];

#[derive(Clone, Copy)]
struct Layout {
    v6: bool,
    entry_size: usize,
    target_offset_at: usize,
    goto_flag: u8,
}

const V4: Layout = Layout {
    v6: false,
    entry_size: 112,
    target_offset_at: 88,
    goto_flag: 0x02, // IPT_F_GOTO
};
const V6: Layout = Layout {
    v6: true,
    entry_size: 168,
    target_offset_at: 140,
    goto_flag: 0x04, // IP6T_F_GOTO
};

/// `thread-self`, not `self`: /proc/self/net is the main thread's namespace,
/// and a thread that entered another namespace (setns) must read its own list.
fn names_path(v6: bool) -> &'static str {
    if v6 {
        "/proc/thread-self/net/ip6_tables_names"
    } else {
        "/proc/thread-self/net/ip_tables_names"
    }
}

/// Whether x_tables for IPv4 is loaded in this namespace (the procfs list
/// exists); a modular kernel loads it on first use (see node::kmod).
pub fn available() -> bool {
    std::path::Path::new(names_path(false)).exists()
}

/// The same for IPv6 (ip6_tables).
pub fn available_v6() -> bool {
    std::path::Path::new(names_path(true)).exists()
}

/// The legacy tables that exist, per `/proc/net/ip{,6}_tables_names`; None
/// when the file is missing (ip{,6}_tables not in the kernel).
pub fn table_names(v6: bool) -> Result<Option<Vec<String>>, KernelError> {
    match std::fs::read_to_string(names_path(v6)) {
        Ok(s) => Ok(Some(parse_names(&s))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(KernelError::io("reading /proc/net/ip*_tables_names", e)),
    }
}

fn parse_names(s: &str) -> Vec<String> {
    s.lines()
        .map(str::trim)
        .filter(|n| !n.is_empty() && n.len() < TABLE_MAXNAMELEN)
        .map(str::to_string)
        .collect()
}

/// Read every existing legacy table, IPv4 then IPv6.
pub fn read() -> Result<RuleSet, KernelError> {
    let mut set = RuleSet::default();
    let mut rules = 0usize;
    for layout in [V4, V6] {
        let Some(names) = table_names(layout.v6)? else {
            continue;
        };
        if names.is_empty() {
            continue; // no socket needed, and nothing to ask about
        }
        let sock = query_socket(layout.v6)?;
        for name in names {
            let table = read_table(&sock, layout, &name)?;
            rules += table.rule_count();
            if rules > MAX_RULES {
                return Err(KernelError::Limit(format!(
                    "more than {MAX_RULES} x_tables rules"
                )));
            }
            set.tables.push(table);
        }
    }
    Ok(set)
}

/// The socket the IPT_SO_GET_* queries go through. Any inet socket reaches
/// the kernel's x_tables getsockopt handler, which itself checks
/// CAP_NET_ADMIN; a UDP socket (unlike iptables' raw one) needs no
/// CAP_NET_RAW, which the reporter DaemonSet deliberately does not have.
fn query_socket(v6: bool) -> Result<OwnedFd, KernelError> {
    let domain = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain socket(2); result checked.
    let fd = unsafe {
        libc::socket(
            domain,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::IPPROTO_UDP,
        )
    };
    if fd < 0 {
        return Err(KernelError::io(
            "opening a socket for x_tables queries",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: fresh valid descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn getsockopt(sock: &OwnedFd, v6: bool, opt: i32, buf: &mut [u8]) -> std::io::Result<usize> {
    let level = if v6 {
        libc::IPPROTO_IPV6
    } else {
        libc::IPPROTO_IP
    };
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf is valid for len bytes; len is updated by the kernel.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            buf.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(len as usize)
    }
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    b.get(off..off + 2)
        .map(|c| u16::from_ne_bytes([c[0], c[1]]))
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

struct Info {
    valid_hooks: u32,
    hook_entry: [u32; 5],
    size: usize,
}

fn read_table(sock: &OwnedFd, layout: Layout, name: &str) -> Result<Table, KernelError> {
    let family = if layout.v6 { Family::Ip6 } else { Family::Ip };
    // The table can change between GET_INFO and GET_ENTRIES (EAGAIN): retry.
    for _ in 0..5 {
        let mut info_buf = [0u8; GETINFO_LEN];
        info_buf[..name.len()].copy_from_slice(name.as_bytes());
        getsockopt(sock, layout.v6, SO_GET_INFO, &mut info_buf)
            .map_err(|e| KernelError::io("getsockopt(IPT_SO_GET_INFO)", e))?;
        let mut hook_entry = [0u32; 5];
        for (h, slot) in hook_entry.iter_mut().enumerate() {
            *slot = u32_at(&info_buf, 36 + 4 * h).unwrap_or(0);
        }
        let info = Info {
            valid_hooks: u32_at(&info_buf, 32).unwrap_or(0),
            hook_entry,
            size: u32_at(&info_buf, 80).unwrap_or(0) as usize,
        };
        if info.size > MAX_BLOB {
            return Err(KernelError::Limit(format!(
                "legacy table {name} is {} bytes (limit {MAX_BLOB})",
                info.size
            )));
        }
        let mut buf = vec![0u8; GET_ENTRIES_HDR + info.size];
        buf[..name.len()].copy_from_slice(name.as_bytes());
        buf[32..36].copy_from_slice(&(info.size as u32).to_ne_bytes());
        match getsockopt(sock, layout.v6, SO_GET_ENTRIES, &mut buf) {
            Ok(_) => {
                let chains = parse_entries(&buf[GET_ENTRIES_HDR..], layout, &info)?;
                return Ok(Table {
                    family,
                    name: name.to_string(),
                    chains,
                    sets: Vec::new(),
                });
            }
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
            Err(e) => return Err(KernelError::io("getsockopt(IPT_SO_GET_ENTRIES)", e)),
        }
    }
    Err(KernelError::Protocol(format!(
        "legacy table {name} kept changing while being read"
    )))
}

/// Split the entry blob into chains. Built-in chains start at their hook
/// entry, user chains after an ERROR entry carrying their name; the last entry
/// of every chain is its policy (built-in) or implicit RETURN (user chain)
/// and is not a rule. The blob ends with an ERROR entry named "ERROR".
fn parse_entries(blob: &[u8], layout: Layout, info: &Info) -> Result<Vec<Chain>, KernelError> {
    let bad =
        |what: &str, off: usize| KernelError::Protocol(format!("x_tables entry at {off}: {what}"));
    let mut hooks: HashMap<usize, &str> = HashMap::new();
    for (h, name) in HOOKS.iter().enumerate() {
        if info.valid_hooks & (1 << h) != 0 {
            hooks.insert(info.hook_entry[h] as usize, name);
        }
    }
    let mut chains: Vec<Chain> = Vec::new();
    // Offset of each user chain's first entry, to resolve jumps.
    let mut chain_at: HashMap<usize, String> = HashMap::new();
    // (chain index, rule index, jump offset, goto) to resolve after the walk.
    let mut pending_jumps: Vec<(usize, usize, usize, bool)> = Vec::new();
    let mut off = 0usize;
    while off < blob.len() {
        let e = &blob[off..];
        let target_off =
            u16_at(e, layout.target_offset_at).ok_or_else(|| bad("truncated", off))? as usize;
        let next =
            u16_at(e, layout.target_offset_at + 2).ok_or_else(|| bad("truncated", off))? as usize;
        if next < layout.entry_size
            || next > e.len()
            || target_off < layout.entry_size
            || target_off + 32 > next
        {
            return Err(bad("inconsistent offsets", off));
        }
        let target = &e[target_off..next];
        let tname = cstr(&target[2..31]);
        if let Some(hook) = hooks.get(&off) {
            chains.push(Chain {
                name: (*hook).to_string(),
                builtin: true,
                rules: Vec::new(),
            });
        }
        if tname == "ERROR" {
            let label = cstr(target.get(32..64).unwrap_or(&[]));
            if label == "ERROR" || off + next >= blob.len() {
                break; // end of table
            }
            chain_at.insert(off + next, label.clone());
            chains.push(Chain {
                name: label,
                builtin: false,
                rules: Vec::new(),
            });
            off += next;
            continue;
        }
        let ci = chains
            .len()
            .checked_sub(1)
            .ok_or_else(|| bad("rule outside any chain", off))?;
        let (rule, jump) = decode_entry(&e[..next], layout, target_off, &tname)?;
        if let Some((to, goto)) = jump {
            pending_jumps.push((ci, chains[ci].rules.len(), to, goto));
        }
        chains[ci].rules.push(rule);
        off += next;
    }
    for (c, r, to, goto) in pending_jumps {
        let v = match chain_at.get(&to) {
            Some(name) if goto => Verdict::Goto(name.clone()),
            Some(name) => Verdict::Jump(name.clone()),
            None => Verdict::Continue, // a jump to the next entry: fall-through
        };
        if let Some(Expr::Verdict(slot)) = chains[c].rules[r].exprs.last_mut() {
            *slot = v;
        }
    }
    // Drop each chain's policy / implicit RETURN entry.
    for chain in &mut chains {
        chain.rules.pop();
    }
    Ok(chains)
}

/// One entry as a rule, plus an unresolved jump offset for standard targets.
fn decode_entry(
    e: &[u8],
    layout: Layout,
    target_off: usize,
    tname: &str,
) -> Result<(Rule, Option<(usize, bool)>), KernelError> {
    let mut rule = Rule::default();
    let (flags, has_ip_condition) = ip_conditions(e, layout);
    if has_ip_condition {
        rule.exprs.push(Expr::IpHeader);
        rule.exprs.extend(exact_daddr(e, layout).map(Expr::Daddr));
    }
    let mut m = layout.entry_size;
    while m + 32 <= target_off {
        let size = u16_at(e, m).unwrap_or(0) as usize;
        if size < 32 || m + size > target_off {
            return Err(KernelError::Protocol(
                "x_tables match overruns its entry".into(),
            ));
        }
        let name = cstr(&e[m + 2..m + 31]);
        let comment = (name == "comment").then(|| cstr(&e[m + 32..m + size]));
        rule.exprs.push(Expr::Match { name, comment });
        m += size;
    }
    rule.exprs.push(Expr::Counter);
    let mut jump = None;
    if tname.is_empty() {
        // XT_STANDARD_TARGET: an int verdict after the header.
        let v = e
            .get(target_off + 32..target_off + 36)
            .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .unwrap_or(i32::MIN);
        let verdict = match v {
            -1 => Verdict::Drop,
            -2 => Verdict::Accept,
            -4 => Verdict::Queue,
            -5 => Verdict::Return,
            n if n >= 0 => {
                jump = Some((n as usize, flags & layout.goto_flag != 0));
                Verdict::Continue
            }
            n => Verdict::Other(n),
        };
        rule.exprs.push(Expr::Verdict(verdict));
    } else {
        rule.exprs.push(Expr::Target {
            name: tname.to_string(),
        });
    }
    Ok((rule, jump))
}

/// The destination of `-d A/32` (`/128`): an all-ones destination mask
/// without the destination inversion flag in the entry's invflags.
fn exact_daddr(e: &[u8], layout: Layout) -> Option<std::net::IpAddr> {
    const INV_DSTIP: u8 = 0x10; // IPT_INV_DSTIP and IP6T_INV_DSTIP
    let (dst, dmsk, inv) = if layout.v6 {
        (16..32, 48..64, 132)
    } else {
        (4..8, 12..16, 83)
    };
    let full = e.get(dmsk)?.iter().all(|&b| b == 0xff);
    if !full || e.get(inv).is_some_and(|&i| i & INV_DSTIP != 0) {
        return None;
    }
    super::addr_prefix(e.get(dst)?, layout.v6)
}

/// (flags, whether the ipt_ip/ip6t_ip6 part matches on anything).
fn ip_conditions(e: &[u8], layout: Layout) -> (u8, bool) {
    let nonzero = |r: std::ops::Range<usize>| e.get(r).is_some_and(|b| b.iter().any(|&x| x != 0));
    if layout.v6 {
        let flags = e.get(131).copied().unwrap_or(0);
        let cond = nonzero(32..64) // smsk, dmsk
            || nonzero(64..96) // iniface, outiface
            || nonzero(128..131) // proto, tos
            || flags & 0x03 != 0 // IP6T_F_PROTO | IP6T_F_TOS
            || e.get(132).is_some_and(|&i| i != 0);
        (flags, cond)
    } else {
        let flags = e.get(82).copied().unwrap_or(0);
        let cond = nonzero(8..16) // smsk, dmsk
            || nonzero(16..48) // iniface, outiface
            || nonzero(80..82) // proto
            || flags & 0x01 != 0 // IPT_F_FRAG
            || e.get(83).is_some_and(|&i| i != 0);
        (flags, cond)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_list_ignores_blank_and_overlong_lines() {
        let long = "x".repeat(40);
        assert_eq!(
            parse_names(&format!("filter\n\n{long}\nmangle\n")),
            vec!["filter", "mangle"]
        );
    }

    #[test]
    fn garbage_blob_is_an_error_not_a_panic() {
        let info = Info {
            valid_hooks: 0b10,
            hook_entry: [0; 5],
            size: 0,
        };
        assert!(parse_entries(&[0u8; 50], V4, &info).is_err());
        assert!(parse_entries(&[0xffu8; 300], V6, &info).is_err());
        assert!(parse_entries(&[], V4, &info).unwrap().is_empty());
    }
}
