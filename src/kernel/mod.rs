//! The live rule sets of the current network namespace, read directly from
//! the kernel and strictly read-only: nf_tables over netlink (`nftables`)
//! and x_tables through procfs + getsockopt (`xtables`). Both produce the same
//! neutral model below, decoded only as far as nfguard's judgements need
//! (names, built-in-ness, and per rule the list of expressions).
//!
//! OWNER: node helper.

pub mod netlink;
pub mod nftables;
pub mod set_userdata;
pub mod xtables;

use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("netlink error: {0}")]
    Netlink(std::io::Error),
    #[error("malformed kernel reply: {0}")]
    Protocol(String),
    #[error("{0}")]
    Limit(String),
}

impl KernelError {
    pub fn io(what: &'static str, source: std::io::Error) -> Self {
        KernelError::Io { what, source }
    }
}

/// Hard limits so a hostile or enormous rule set cannot exhaust memory.
pub const MAX_RULES: usize = 2_000_000;
pub const MAX_CHAINS: usize = 500_000;

/// Address family of a table (nf_tables NFPROTO_* numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    Inet,
    Ip,
    Arp,
    Netdev,
    Bridge,
    Ip6,
    Other(u8),
}

impl Family {
    pub fn from_nfproto(p: u8) -> Self {
        match p {
            1 => Family::Inet,
            2 => Family::Ip,
            3 => Family::Arp,
            5 => Family::Netdev,
            7 => Family::Bridge,
            10 => Family::Ip6,
            other => Family::Other(other),
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Ip => "ip",
            Family::Arp => "arp",
            Family::Netdev => "netdev",
            Family::Bridge => "bridge",
            Family::Ip6 => "ip6",
            Family::Other(_) => "unknown",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Family::Other(n) => write!(f, "family{n}"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// The tables iptables (nft or legacy) owns: ip/ip6 families, these names.
pub const IPTABLES_TABLES: [&str; 5] = ["filter", "nat", "mangle", "raw", "security"];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub family: Family,
    pub name: String,
    pub chains: Vec<Chain>,
    /// Named sets and maps (nf_tables only; legacy tables have none).
    pub sets: Vec<NamedSet>,
}

/// A named nf_tables set or map. Its elements are read only where a
/// judgement needs them (see `nftables::read`); elsewhere `keys` is empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamedSet {
    pub name: String,
    /// Raw element keys (a concatenation's fields each padded to 4 bytes).
    pub keys: Vec<Vec<u8>>,
    /// What its userdata says about the `nft` that wrote it (every set's).
    pub userdata: set_userdata::SetUserdata,
}

impl Table {
    /// True for ip/ip6 filter, nat, mangle, raw, security.
    pub fn iptables_owned(&self) -> bool {
        matches!(self.family, Family::Ip | Family::Ip6)
            && IPTABLES_TABLES.contains(&self.name.as_str())
    }
    pub fn rule_count(&self) -> usize {
        self.chains.iter().map(|c| c.rules.len()).sum()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    /// Attached to a netfilter hook (INPUT, PREROUTING, ...), not a user chain.
    pub builtin: bool,
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub exprs: Vec<Expr>,
}

/// Where a verdict sends the packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    Drop,
    Return,
    Continue,
    Queue,
    Jump(String),
    Goto(String),
    Other(i32),
}

/// One step of a rule. nf_tables expressions keep their kernel names; an
/// x_tables entry is mapped to the same vocabulary (its matches and target
/// become `Match`/`Target`/`Verdict`, its IP header conditions `IpHeader`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// An xt match (nft compat `match` or a legacy entry match); `comment`
    /// carries the text of `-m comment`.
    Match {
        name: String,
        comment: Option<String>,
    },
    /// An xt target other than the standard verdicts (REJECT, MARK, NFLOG, ...).
    Target {
        name: String,
    },
    Verdict(Verdict),
    /// `meta` load (or set when `set`) of key NFT_META_*.
    Meta {
        key: u32,
        set: bool,
    },
    /// `payload` load: base 0 link, 1 network, 2 transport header.
    Payload {
        base: u32,
        offset: u32,
        len: u32,
    },
    Cmp,
    Bitwise,
    Range,
    Counter,
    /// Native `log` (what iptables-nft >= 1.8.8 writes for NFLOG).
    Log,
    /// Legacy only: the entry's IP header part (addresses, interfaces, protocol) has a condition.
    IpHeader,
    /// The rule matches exactly this destination address (`-d A/32` or
    /// `/128`, not inverted); follows the expressions that encode it.
    Daddr(std::net::IpAddr),
    /// Any other nf_tables expression, by kernel name.
    Other(String),
}

pub const NFT_META_MARK: u32 = 3;
pub const NFT_META_IIFNAME: u32 = 6;
pub const NFT_META_OIFNAME: u32 = 7;
pub const NFT_META_L4PROTO: u32 = 16;
pub const NFT_PAYLOAD_NETWORK: u32 = 1;
pub const NFT_PAYLOAD_TRANSPORT: u32 = 2;

/// The IPv4 (or, when `v6`, IPv6) address at the start of `b`; None when `b` is too short.
pub fn addr_prefix(b: &[u8], v6: bool) -> Option<std::net::IpAddr> {
    if v6 {
        <[u8; 16]>::try_from(b.get(..16)?).ok().map(Into::into)
    } else {
        <[u8; 4]>::try_from(b.get(..4)?).ok().map(Into::into)
    }
}

/// One backend's rule set in the current network namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSet {
    pub tables: Vec<Table>,
}

impl RuleSet {
    pub fn rule_count(&self) -> usize {
        self.tables.iter().map(Table::rule_count).sum()
    }
}

/// Render a rule roughly as `iptables -S` would, for hazard messages. Native
/// nf_tables expressions that have no xt name are shown in brackets.
pub fn render_rule(chain: &str, rule: &Rule) -> String {
    let mut out = format!("-A {chain}");
    let mut i = 0;
    while i < rule.exprs.len() {
        let e = &rule.exprs[i];
        match e {
            Expr::Match { name, comment } => {
                out.push_str(&format!(" -m {name}"));
                if let Some(c) = comment {
                    out.push_str(&format!(" --comment \"{c}\""));
                }
            }
            Expr::Target { name } => out.push_str(&format!(" -j {name}")),
            Expr::Verdict(v) => out.push_str(&match v {
                Verdict::Accept => " -j ACCEPT".to_string(),
                Verdict::Drop => " -j DROP".to_string(),
                Verdict::Return => " -j RETURN".to_string(),
                Verdict::Queue => " -j QUEUE".to_string(),
                Verdict::Continue => String::new(),
                Verdict::Jump(c) => format!(" -j {c}"),
                Verdict::Goto(c) => format!(" -g {c}"),
                Verdict::Other(n) => format!(" [verdict {n}]"),
            }),
            Expr::Meta { key, set } => out.push_str(&format!(
                " [meta {}{}]",
                if *set { "set " } else { "" },
                meta_key_name(*key)
            )),
            Expr::Payload { base, offset, len } => out.push_str(&format!(
                " [payload {} +{offset} len {len}]",
                match *base {
                    0 => "link",
                    1 => "network",
                    2 => "transport",
                    _ => "?",
                }
            )),
            Expr::Log => out.push_str(" [log]"),
            Expr::IpHeader => out.push_str(" [ip header match]"),
            Expr::Daddr(a) => out.push_str(&format!(" -d {a}")),
            Expr::Range => out.push_str(" [range]"),
            Expr::Other(n) => out.push_str(&format!(" [{n}]")),
            Expr::Cmp | Expr::Bitwise | Expr::Counter => {}
        }
        i += 1;
    }
    out
}

pub fn meta_key_name(key: u32) -> String {
    match key {
        0 => "len".into(),
        1 => "protocol".into(),
        3 => "mark".into(),
        4 => "iif".into(),
        5 => "oif".into(),
        6 => "iifname".into(),
        7 => "oifname".into(),
        15 => "nfproto".into(),
        16 => "l4proto".into(),
        k => format!("key{k}"),
    }
}
