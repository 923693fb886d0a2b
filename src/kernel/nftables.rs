//! nf_tables, read over netlink: three dumps (tables, chains, rules) for all
//! families at once (NFPROTO_UNSPEC), bracketed by the ruleset generation so
//! a change in between is noticed and the read repeated. Only the attributes
//! the probe uses are decoded.

use super::netlink::{Message, Socket, attr_be32, attr_str, attrs, put_str};
use super::{
    Chain, Expr, Family, KernelError, MAX_CHAINS, MAX_RULES, Rule, RuleSet, Table, Verdict,
};
use std::collections::HashMap;

const NFT_MSG_GETTABLE: u16 = 1;
const NFT_MSG_GETCHAIN: u16 = 4;
const NFT_MSG_GETRULE: u16 = 7;
const NFT_MSG_GETGEN: u16 = 16;
const NFPROTO_UNSPEC: u8 = 0;
const ATTEMPTS: usize = 5;

/// Read every nf_tables table and chain of the current network namespace,
/// and the rules of the iptables-owned tables (ip/ip6 filter, nat, mangle,
/// raw, security); other tables are listed with their chains but no rules.
/// `Err(KernelError::Netlink(..))` with EPROTONOSUPPORT/EOPNOTSUPP/ENOENT-like
/// errors means the kernel has no nf_tables.
pub fn read() -> Result<RuleSet, KernelError> {
    let mut sock = Socket::open()?;
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let before = generation(&mut sock)?;
        match read_once(&mut sock)? {
            Some(set) if generation(&mut sock)? == before => return Ok(set),
            Some(set) => last = Some(set),
            None => {}
        }
    }
    // The rule set kept changing under us; the last complete read is still
    // a faithful picture of one recent moment per object type.
    last.ok_or_else(|| {
        KernelError::Protocol(format!(
            "nf_tables dump interrupted {ATTEMPTS} times in a row (rules changing constantly)"
        ))
    })
}

/// Whether the kernel has nf_tables. A permission error still means it
/// exists (the caller lacks CAP_NET_ADMIN); a kernel without it rejects the
/// subsystem with EOPNOTSUPP/EPROTONOSUPPORT/EINVAL.
pub fn available() -> bool {
    match generation_id() {
        Ok(_) => true,
        Err(KernelError::Netlink(e)) => {
            matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
        }
        Err(_) => false,
    }
}

/// The nf_tables ruleset generation: it changes with every committed change,
/// so a caller can skip a full read when it equals the last one seen.
pub fn generation_id() -> Result<u32, KernelError> {
    generation(&mut Socket::open()?)
}

fn generation(sock: &mut Socket) -> Result<u32, KernelError> {
    let mut gen_id = None;
    sock.request(NFT_MSG_GETGEN, NFPROTO_UNSPEC, false, |m| {
        for (ty, p) in attrs(m.attrs) {
            if ty == 1 {
                gen_id = attr_be32(p);
            }
        }
        Ok(())
    })?;
    gen_id.ok_or_else(|| KernelError::Protocol("NEWGEN reply without a generation id".into()))
}

/// One pass; None when a dump was interrupted (the caller retries).
fn read_once(sock: &mut Socket) -> Result<Option<RuleSet>, KernelError> {
    let mut set = RuleSet::default();
    let mut table_idx: HashMap<(u8, String), usize> = HashMap::new();
    let mut chain_idx: HashMap<(usize, String), usize> = HashMap::new();

    let intact = sock.request(NFT_MSG_GETTABLE, NFPROTO_UNSPEC, true, |m| {
        let mut name = None;
        for (ty, p) in attrs(m.attrs) {
            if ty == 1 {
                name = Some(attr_str(p));
            }
        }
        if let Some(name) = name {
            table_idx.insert((m.family, name.clone()), set.tables.len());
            set.tables.push(Table {
                family: Family::from_nfproto(m.family),
                name,
                chains: Vec::new(),
            });
        }
        Ok(())
    })?;
    if !intact {
        return Ok(None);
    }

    let mut chains = 0usize;
    let intact = sock.request(NFT_MSG_GETCHAIN, NFPROTO_UNSPEC, true, |m| {
        let (mut table, mut name, mut builtin) = (None, None, false);
        for (ty, p) in attrs(m.attrs) {
            match ty {
                1 => table = Some(attr_str(p)),
                3 => name = Some(attr_str(p)),
                4 => builtin = true, // NFTA_CHAIN_HOOK: a base chain
                _ => {}
            }
        }
        let (Some(table), Some(name)) = (table, name) else {
            return Ok(());
        };
        chains += 1;
        if chains > MAX_CHAINS {
            return Err(KernelError::Limit(format!(
                "more than {MAX_CHAINS} nf_tables chains"
            )));
        }
        if let Some(&t) = table_idx.get(&(m.family, table)) {
            let chains = &mut set.tables[t].chains;
            chain_idx.insert((t, name.clone()), chains.len());
            chains.push(Chain {
                name,
                builtin,
                rules: Vec::new(),
            });
        }
        Ok(())
    })?;
    if !intact {
        return Ok(None);
    }

    // Rules only of the iptables-owned tables, one filtered dump per table:
    // the kernel serializes nothing else (a node may hold large native nft
    // rule sets of its own), and a dump continuation only re-walks its table.
    let mut rules = 0usize;
    // Cache the last (table, chain) lookup: a dump delivers each chain's rules together.
    let mut last: Option<(u8, String, String, usize, usize)> = None;
    // One filtered dump per chain of the iptables-owned tables. The kernel
    // resumes a multi-part dump by re-walking every rule before the resume
    // point, which is quadratic over one big dump; per chain it only
    // re-walks that chain, and nothing outside iptables' tables is
    // serialized at all (a node may hold large native nft rule sets).
    let mut requests: Vec<(u8, String, String)> = Vec::new();
    for ((family, table), &ti) in &table_idx {
        let fam = Family::from_nfproto(*family);
        if !(matches!(fam, Family::Ip | Family::Ip6)
            && super::IPTABLES_TABLES.contains(&table.as_str()))
        {
            continue;
        }
        for chain in &set.tables[ti].chains {
            requests.push((*family, table.clone(), chain.name.clone()));
        }
    }
    let mut filter = Vec::with_capacity(128);
    for (family, table, chain) in requests {
        filter.clear();
        put_str(&mut filter, 1, &table); // NFTA_RULE_TABLE
        put_str(&mut filter, 2, &chain); // NFTA_RULE_CHAIN
        let res = sock.request_with(NFT_MSG_GETRULE, family, true, &filter, |m| {
            rules += 1;
            if rules > MAX_RULES {
                return Err(KernelError::Limit(format!(
                    "more than {MAX_RULES} nf_tables rules"
                )));
            }
            decode_rule(m, &table_idx, &chain_idx, &mut last, &mut set)
        });
        match res {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            // The table or chain went away since its dump: read again.
            Err(KernelError::Netlink(e)) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(set))
}

fn decode_rule(
    m: &Message<'_>,
    table_idx: &HashMap<(u8, String), usize>,
    chain_idx: &HashMap<(usize, String), usize>,
    last: &mut Option<(u8, String, String, usize, usize)>,
    set: &mut RuleSet,
) -> Result<(), KernelError> {
    let (mut table, mut chain, mut exprs_raw) = (None, None, None);
    for (ty, p) in attrs(m.attrs) {
        match ty {
            1 => table = Some(p),
            2 => chain = Some(p),
            4 => exprs_raw = Some(p),
            _ => {}
        }
    }
    let (Some(table), Some(chain)) = (table, chain) else {
        return Ok(());
    };
    // Compare raw bytes with the cached chain first: no allocation per rule.
    let (table, chain) = (cbytes(table), cbytes(chain));
    let hit = matches!(last, Some((f, t, c, _, _))
        if *f == m.family && t.as_bytes() == table && c.as_bytes() == chain);
    if !hit {
        let (table, chain) = (
            String::from_utf8_lossy(table).into_owned(),
            String::from_utf8_lossy(chain).into_owned(),
        );
        let Some(&ti) = table_idx.get(&(m.family, table.clone())) else {
            return Ok(()); // table created after our table dump; the generation check catches it
        };
        let Some(&ci) = chain_idx.get(&(ti, chain.clone())) else {
            return Ok(());
        };
        *last = Some((m.family, table, chain, ti, ci));
    }
    let Some((_, _, _, ti, ci)) = last else {
        return Ok(());
    };
    let mut rule = Rule {
        exprs: Vec::with_capacity(8),
    };
    if let Some(list) = exprs_raw {
        for (ty, elem) in attrs(list) {
            if ty == 1 {
                // NFTA_LIST_ELEM
                rule.exprs.push(decode_expr(elem));
            }
        }
    }
    set.tables[*ti].chains[*ci].rules.push(rule);
    Ok(())
}

/// A NUL-terminated attribute's bytes, without allocating.
fn cbytes(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end]
}

fn decode_expr(elem: &[u8]) -> Expr {
    let (mut name, mut data) = (&[][..], &[][..]);
    for (ty, p) in attrs(elem) {
        match ty {
            1 => name = cbytes(p),
            2 => data = p,
            _ => {}
        }
    }
    match name {
        b"match" => {
            let (mut xt, mut info) = (String::new(), &[][..]);
            for (ty, p) in attrs(data) {
                match ty {
                    1 => xt = attr_str(p),
                    3 => info = p,
                    _ => {}
                }
            }
            let comment = (xt == "comment").then(|| attr_str(info));
            Expr::Match { name: xt, comment }
        }
        b"target" => {
            let xt = attrs(data)
                .find(|(ty, _)| *ty == 1)
                .map(|(_, p)| attr_str(p))
                .unwrap_or_default();
            Expr::Target { name: xt }
        }
        b"meta" => {
            let (mut key, mut set) = (u32::MAX, false);
            for (ty, p) in attrs(data) {
                match ty {
                    2 => key = attr_be32(p).unwrap_or(u32::MAX),
                    3 => set = true, // NFTA_META_SREG: meta set
                    _ => {}
                }
            }
            Expr::Meta { key, set }
        }
        b"payload" => {
            let (mut base, mut offset, mut len) = (u32::MAX, 0, 0);
            for (ty, p) in attrs(data) {
                match ty {
                    2 => base = attr_be32(p).unwrap_or(u32::MAX),
                    3 => offset = attr_be32(p).unwrap_or(0),
                    4 => len = attr_be32(p).unwrap_or(0),
                    _ => {}
                }
            }
            Expr::Payload { base, offset, len }
        }
        b"immediate" => decode_immediate(data),
        b"cmp" => Expr::Cmp,
        b"bitwise" => Expr::Bitwise,
        b"range" => Expr::Range,
        b"counter" => Expr::Counter,
        b"log" => Expr::Log,
        other => Expr::Other(String::from_utf8_lossy(other).into_owned()),
    }
}

fn decode_immediate(data: &[u8]) -> Expr {
    for (ty, p) in attrs(data) {
        if ty != 2 {
            continue; // NFTA_IMMEDIATE_DATA
        }
        for (dty, dp) in attrs(p) {
            if dty != 2 {
                continue; // NFTA_DATA_VERDICT
            }
            let (mut code, mut chain) = (None, String::new());
            for (vty, vp) in attrs(dp) {
                match vty {
                    1 => code = attr_be32(vp).map(|c| c as i32),
                    2 => chain = attr_str(vp),
                    _ => {}
                }
            }
            return Expr::Verdict(match code {
                Some(0) => Verdict::Drop,
                Some(1) => Verdict::Accept,
                Some(3) => Verdict::Queue,
                Some(-1) => Verdict::Continue,
                Some(-3) => Verdict::Jump(chain),
                Some(-4) => Verdict::Goto(chain),
                Some(-5) => Verdict::Return,
                Some(n) => Verdict::Other(n),
                None => Verdict::Other(i32::MIN),
            });
        }
    }
    Expr::Other("immediate".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((payload.len() + 4) as u16).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn decodes_a_drop_verdict_and_a_comment_match() {
        let verdict = attr(1, &0u32.to_be_bytes());
        let imm = attr(2, &attr(2, &verdict));
        let e = [attr(1, b"immediate\0"), attr(2, &imm)].concat();
        assert_eq!(decode_expr(&e), Expr::Verdict(Verdict::Drop));

        let m = [attr(1, b"comment\0"), attr(3, b"hello\0\0\0")].concat();
        let e = [attr(1, b"match\0"), attr(2, &m)].concat();
        assert_eq!(
            decode_expr(&e),
            Expr::Match {
                name: "comment".into(),
                comment: Some("hello".into())
            }
        );
    }

    #[test]
    fn garbage_expression_is_other_not_a_panic() {
        assert_eq!(decode_expr(&[0xff, 0xff, 1]), Expr::Other(String::new()));
        let e = [attr(1, b"payload\0"), attr(2, &[1, 2, 3])].concat();
        assert!(matches!(decode_expr(&e), Expr::Payload { .. }));
    }
}
