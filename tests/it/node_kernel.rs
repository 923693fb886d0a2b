//! The kernel readers in-process: a thread enters the test's namespace
//! (setns) and reads both backends directly; checks the decoded model.

use crate::support::netns;

use netns::Netns;
use nfguard::kernel::{Expr, RuleSet, Verdict, nftables, xtables};
use std::os::fd::AsRawFd;

/// Run `f` on a thread that has entered the namespace `ns`.
fn in_netns<T: Send + 'static>(ns: &Netns, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{}", ns.name);
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("open netns");
        // SAFETY: valid fd; only this thread changes namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("netns thread")
}

fn chain<'a>(
    set: &'a RuleSet,
    family: &str,
    table: &str,
    name: &str,
) -> &'a nfguard::kernel::Chain {
    set.tables
        .iter()
        .find(|t| t.family.as_str() == family && t.name == table)
        .and_then(|t| t.chains.iter().find(|c| c.name == name))
        .unwrap_or_else(|| panic!("no {family}/{table}/{name} in {set:#?}"))
}

fn write(ns: &Netns, tool: &str) {
    for args in [
        &["-N", "KUBE-A"][..],
        &["-N", "KUBE-B"],
        &["-A", "INPUT", "-j", "KUBE-A"],
        &["-A", "INPUT", "-g", "KUBE-B"],
        &[
            "-A",
            "KUBE-A",
            "-p",
            "tcp",
            "-m",
            "comment",
            "--comment",
            "hello",
            "-j",
            "DROP",
        ],
        &[
            "-A",
            "KUBE-B",
            "-m",
            "comment",
            "--comment",
            "bye",
            "-j",
            "REJECT",
        ],
        &["-A", "KUBE-B", "-j", "RETURN"],
    ] {
        ns.iptables_ok("1.8.9", tool, args);
    }
}

fn check_model(set: &RuleSet, family: &str) {
    let input = chain(set, family, "filter", "INPUT");
    assert!(input.builtin);
    let verdicts: Vec<&Verdict> = input
        .rules
        .iter()
        .filter_map(|r| match r.exprs.last() {
            Some(Expr::Verdict(v)) => Some(v),
            _ => None,
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            &Verdict::Jump("KUBE-A".into()),
            &Verdict::Goto("KUBE-B".into())
        ],
        "{family}: {input:#?}"
    );
    let a = chain(set, family, "filter", "KUBE-A");
    assert!(!a.builtin);
    assert_eq!(a.rules.len(), 1, "{a:#?}");
    assert!(a.rules[0].exprs.contains(&Expr::Verdict(Verdict::Drop)));
    assert!(a.rules[0].exprs.iter().any(
        |e| matches!(e, Expr::Match { name, comment: Some(c) } if name == "comment" && c == "hello")
    ));
    let b = chain(set, family, "filter", "KUBE-B");
    assert_eq!(b.rules.len(), 2, "{b:#?}");
    assert!(b.rules[0].exprs.contains(&Expr::Target {
        name: "REJECT".into()
    }));
    assert_eq!(
        b.rules[1].exprs.last(),
        Some(&Expr::Verdict(Verdict::Return))
    );
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn legacy_reader_decodes_chains_jumps_and_verdicts() {
    let ns = Netns::new("klegacy");
    write(&ns, "iptables-legacy");
    let set = in_netns(&ns, || xtables::read().expect("read x_tables"));
    check_model(&set, "ip");
    // The IPv4 condition `-p tcp` is in the entry's IP header part.
    assert!(
        chain(&set, "ip", "filter", "KUBE-A").rules[0]
            .exprs
            .contains(&Expr::IpHeader)
    );
    assert!(
        set.tables.iter().all(|t| t.family.as_str() == "ip"),
        "no IPv6 table asked about"
    );
    assert_eq!(ns.read("/proc/net/ip6_tables_names").trim(), "");
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn ipv6_legacy_reader() {
    let ns = Netns::new("klegacy6");
    write(&ns, "ip6tables-legacy");
    let set = in_netns(&ns, || xtables::read().expect("read x_tables"));
    check_model(&set, "ip6");
    assert_eq!(
        ns.read("/proc/net/ip_tables_names").trim(),
        "",
        "no IPv4 table created"
    );
}

#[test]
#[ignore = "needs root: network namespaces (scripts/test.sh runs it; as root: cargo test -- --include-ignored)"]
fn nft_reader_decodes_chains_jumps_and_verdicts() {
    let ns = Netns::new("knft");
    write(&ns, "iptables-nft");
    write(&ns, "ip6tables-nft");
    let (set, generation) = in_netns(&ns, || {
        (
            nftables::read().expect("read nf_tables"),
            nftables::generation_id().expect("genid"),
        )
    });
    check_model(&set, "ip");
    check_model(&set, "ip6");
    ns.iptables_ok("1.8.9", "iptables-nft", &["-A", "KUBE-B", "-j", "ACCEPT"]);
    let later = in_netns(&ns, || nftables::generation_id().expect("genid"));
    assert_ne!(generation, later, "a change moves the generation");
}
