//! nf_tables, read over netlink: dumps of tables, chains, rules and sets for
//! all families at once (NFPROTO_UNSPEC; rules per chain), bracketed by the
//! ruleset generation so a change in between is noticed and the read
//! repeated. Only the attributes the probe uses are decoded.

use super::netlink::{Message, Socket, attr_be32, attr_str, attrs, put_str};
use super::set_userdata::SetUserdata;
use super::{
    Chain, Expr, Family, KernelError, MAX_CHAINS, MAX_RULES, NamedSet, Rule, RuleSet, Table,
    Verdict,
};
use std::collections::HashMap;
use std::net::IpAddr;

const NFT_MSG_GETTABLE: u16 = 1;
const NFT_MSG_GETCHAIN: u16 = 4;
const NFT_MSG_GETRULE: u16 = 7;
const NFT_MSG_GETSET: u16 = 10;
const NFT_MSG_GETSETELEM: u16 = 13;
const NFT_MSG_GETGEN: u16 = 16;
const NFT_SET_ANONYMOUS: u32 = 0x1;
/// At most this many named sets are kept (counted beyond, never stored).
pub const MAX_SETS: usize = 100_000;
/// At most this many elements are read per set whose elements are read.
pub const MAX_SET_ELEMENTS: usize = 200_000;
/// The sets whose element keys are read, by (table, set) in the ip and ip6
/// families: kube-proxy's nftables-mode Service map (ClusterIP . proto . port
/// -> verdict), to compare with an iptables-mode KUBE-SERVICES left behind.
pub const ELEMENTS_READ: [(&str, &str); 1] = [("kube-proxy", "service-ips")];
const NFPROTO_UNSPEC: u8 = 0;
const ATTEMPTS: usize = 5;

/// Read every nf_tables table, chain, rule and named set of the current
/// network namespace (set elements only of `ELEMENTS_READ`). The rules of
/// tables iptables does not own are counted with empty expression lists.
/// Rules of every table count against `MAX_RULES`.
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
                sets: Vec::new(),
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

    let mut rules = 0usize;
    // Cache the last (table, chain) lookup: a dump delivers each chain's rules together.
    let mut last: Option<(u8, String, String, usize, usize)> = None;
    // One filtered dump per chain. The kernel resumes a multi-part dump by
    // re-walking every rule before the resume point, which is quadratic over
    // one big dump; per chain it only re-walks that chain. The iptables-owned
    // tables come first, so their rules are read before any native ones.
    let mut requests: Vec<(bool, u8, String, String)> = Vec::new();
    for ((family, table), &ti) in &table_idx {
        let owned = set.tables[ti].iptables_owned();
        for chain in &set.tables[ti].chains {
            requests.push((!owned, *family, table.clone(), chain.name.clone()));
        }
    }
    requests.sort();
    let requests = requests.into_iter().map(|(_, f, t, c)| (f, t, c));
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
    if !read_sets(sock, &table_idx, &mut set)? {
        return Ok(None);
    }
    Ok(Some(set))
}

/// The named sets of every table, and the element keys of `ELEMENTS_READ`.
/// Ok(false) when a dump was interrupted.
fn read_sets(
    sock: &mut Socket,
    table_idx: &HashMap<(u8, String), usize>,
    set: &mut RuleSet,
) -> Result<bool, KernelError> {
    let mut count = 0usize;
    let intact = sock.request(NFT_MSG_GETSET, NFPROTO_UNSPEC, true, |m| {
        let (mut table, mut name, mut flags) = (None, None, 0u32);
        let mut userdata = SetUserdata::default();
        for (ty, p) in attrs(m.attrs) {
            match ty {
                1 => table = Some(attr_str(p)),
                2 => name = Some(attr_str(p)),
                3 => flags = attr_be32(p).unwrap_or(0),
                13 => userdata = SetUserdata::parse(p), // NFTA_SET_USERDATA
                _ => {}
            }
        }
        let (Some(table), Some(name)) = (table, name) else {
            return Ok(());
        };
        if flags & NFT_SET_ANONYMOUS != 0 {
            return Ok(()); // `{ a, b }` inside a rule, not a set of the table
        }
        count += 1;
        if count > MAX_SETS {
            return Err(KernelError::Limit(format!(
                "more than {MAX_SETS} named nf_tables sets"
            )));
        }
        if let Some(&t) = table_idx.get(&(m.family, table)) {
            set.tables[t].sets.push(NamedSet {
                name,
                keys: Vec::new(),
                userdata,
            });
        }
        Ok(())
    })?;
    if !intact {
        return Ok(false);
    }
    let mut filter = Vec::with_capacity(64);
    for (&(family, ref table), &ti) in table_idx {
        if !matches!(Family::from_nfproto(family), Family::Ip | Family::Ip6) {
            continue;
        }
        for s in set.tables[ti].sets.iter_mut() {
            if !ELEMENTS_READ.contains(&(table.as_str(), s.name.as_str())) {
                continue;
            }
            filter.clear();
            put_str(&mut filter, 1, table); // NFTA_SET_ELEM_LIST_TABLE
            put_str(&mut filter, 2, &s.name); // NFTA_SET_ELEM_LIST_SET
            let keys = &mut s.keys;
            let res = sock.request_with(NFT_MSG_GETSETELEM, family, true, &filter, |m| {
                decode_elements(m.attrs, keys)
            });
            match res {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(KernelError::Netlink(e)) if e.raw_os_error() == Some(libc::ENOENT) => {
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(true)
}

/// The keys of one GETSETELEM reply (NFTA_SET_ELEM_LIST_ELEMENTS ->
/// NFTA_LIST_ELEM -> NFTA_SET_ELEM_KEY -> NFTA_DATA_VALUE), bounded.
fn decode_elements(list: &[u8], keys: &mut Vec<Vec<u8>>) -> Result<(), KernelError> {
    for (ty, elems) in attrs(list) {
        if ty != 3 {
            continue;
        }
        for (ety, elem) in attrs(elems) {
            if ety != 1 {
                continue;
            }
            let key = attrs(elem)
                .filter(|(k, _)| *k == 1)
                .flat_map(|(_, key)| attrs(key))
                .find(|(d, _)| *d == 1)
                .map(|(_, v)| v.to_vec());
            if let Some(key) = key {
                if keys.len() >= MAX_SET_ELEMENTS {
                    return Err(KernelError::Limit(format!(
                        "more than {MAX_SET_ELEMENTS} elements in one nf_tables set"
                    )));
                }
                keys.push(key);
            }
        }
    }
    Ok(())
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
    // A native table's rules are counted, not decoded: no judgement reads them.
    let owned = set.tables[*ti].iptables_owned();
    let mut rule = Rule {
        exprs: Vec::with_capacity(if owned { 8 } else { 0 }),
    };
    if let Some(list) = exprs_raw.filter(|_| owned) {
        for (ty, elem) in attrs(list) {
            if ty == 1 {
                // NFTA_LIST_ELEM
                let e = decode_expr(elem);
                let daddr = match (&e, rule.exprs.last()) {
                    (Expr::Cmp, Some(Expr::Payload { base, offset, len })) => {
                        exact_daddr(m.family, (*base, *offset, *len), elem)
                    }
                    _ => None,
                };
                rule.exprs.push(e);
                rule.exprs.extend(daddr.map(Expr::Daddr));
            }
        }
    }
    set.tables[*ti].chains[*ci].rules.push(rule);
    Ok(())
}

/// The address of `ip daddr == A` / `ip6 daddr == A` (iptables-nft's `-d A/32`
/// or `/128`): a network-header payload load of the destination address
/// followed by an equality `cmp` with data of that length.
fn exact_daddr(family: u8, (base, offset, len): (u32, u32, u32), cmp: &[u8]) -> Option<IpAddr> {
    const NFT_CMP_EQ: u32 = 0;
    if base != super::NFT_PAYLOAD_NETWORK {
        return None;
    }
    let v6 = match (Family::from_nfproto(family), offset, len) {
        (Family::Ip, 16, 4) => false,
        (Family::Ip6, 24, 16) => true,
        _ => return None,
    };
    let data = attrs(cmp).find(|(ty, _)| *ty == 2).map(|(_, d)| d)?; // NFTA_EXPR_DATA
    let (mut op, mut value) = (None, None);
    for (ty, p) in attrs(data) {
        match ty {
            2 => op = attr_be32(p),                                       // NFTA_CMP_OP
            3 => value = attrs(p).find(|(d, _)| *d == 1).map(|(_, v)| v), // NFTA_CMP_DATA/VALUE
            _ => {}
        }
    }
    if op != Some(NFT_CMP_EQ) {
        return None;
    }
    let value = value?;
    // Exactly the address: a longer compare is another match.
    (value.len() == if v6 { 16 } else { 4 })
        .then(|| super::addr_prefix(value, v6))
        .flatten()
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
    fn exact_destination_from_payload_and_equality_compare() {
        let cmp = |op: u32, value: &[u8]| {
            let data = [
                attr(1, &1u32.to_be_bytes()),
                attr(2, &op.to_be_bytes()),
                attr(3, &attr(1, value)),
            ]
            .concat();
            [attr(1, b"cmp\0"), attr(2, &data)].concat()
        };
        let ip4: IpAddr = "10.96.0.10".parse().unwrap();
        let e = cmp(0, &[10, 96, 0, 10]);
        assert_eq!(exact_daddr(2, (1, 16, 4), &e), Some(ip4));
        assert_eq!(exact_daddr(2, (1, 12, 4), &e), None, "the source address");
        assert_eq!(
            exact_daddr(10, (1, 16, 4), &e),
            None,
            "not an IPv6 destination"
        );
        assert_eq!(
            exact_daddr(2, (1, 16, 4), &cmp(1, &[10, 96, 0, 10])),
            None,
            "!="
        );
        let ip6: IpAddr = "fd00::10".parse().unwrap();
        let IpAddr::V6(v6) = ip6 else { unreachable!() };
        assert_eq!(
            exact_daddr(10, (1, 24, 16), &cmp(0, &v6.octets())),
            Some(ip6)
        );
        assert_eq!(
            exact_daddr(10, (1, 24, 16), &cmp(0, &[1, 2, 3])),
            None,
            "short data"
        );
    }

    #[test]
    fn garbage_expression_is_other_not_a_panic() {
        assert_eq!(decode_expr(&[0xff, 0xff, 1]), Expr::Other(String::new()));
        let e = [attr(1, b"payload\0"), attr(2, &[1, 2, 3])].concat();
        assert!(matches!(decode_expr(&e), Expr::Payload { .. }));
    }
}
