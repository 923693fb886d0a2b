//! Which registry hosts and addresses nfguard may connect to. An image
//! reference names any `host:port`; without a policy the webhook would
//! connect wherever a tenant points it (its own admin port, cluster
//! services, cloud metadata). Pure: the HTTP client asks this module about
//! every resolved address, IP-literal URL and redirect hop.
//!
//! Order of the rules: a denied host or CIDR always refuses; an allowed host
//! or CIDR lifts a default refusal; with `Defaults::RefuseInternal` loopback,
//! link-local, unspecified, multicast and broadcast addresses and the
//! private ranges (RFC 1918, the shared 100.64.0.0/10, IPv6 ULA fc00::/7)
//! are refused, also in their IPv4-mapped, IPv4-compatible and NAT64 IPv6
//! forms. The private ranges hold the cluster itself (Service and pod
//! ranges, node addresses: the kubelet's and etcd's ports, the API server),
//! so a private registry is allowed by name or range
//! (`--registry-allow-host`, `--registry-allow-cidr`).

use ipnet::IpNet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// What is refused when no rule names the host or address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Defaults {
    /// Nothing (the CLI fetches what its own user names, loopback included).
    #[default]
    AllowAll,
    /// Loopback, link-local, unspecified, multicast and broadcast addresses
    /// and the private ranges (the webhook and the controller, which fetch
    /// what tenants name).
    RefuseInternal,
}

/// Why the policy refused a host or address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("host on the deny list")]
    DeniedHost,
    #[error("address in a denied range")]
    DeniedCidr,
    #[error("loopback address")]
    Loopback,
    #[error("link-local address")]
    LinkLocal,
    #[error("unspecified address")]
    Unspecified,
    #[error("multicast address")]
    Multicast,
    #[error("broadcast address")]
    Broadcast,
    #[error(
        "private address (allow a private registry with --registry-allow-host or --registry-allow-cidr)"
    )]
    Private,
    #[error("no address left after filtering")]
    NoAddress,
}

/// A refusal and the host it was about: the error the resolver and the
/// redirect policy hand to the HTTP client, found again in its error chain.
/// The host may come from a registry's redirect: log it, never show it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("registry egress policy refuses {host}: {refusal}")]
pub struct EgressRefused {
    pub host: String,
    pub refusal: Refusal,
}

/// A CIDR (`10.0.0.0/8`, `fd00::/8`) or a single address (`127.0.0.1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(pub IpNet);

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(Cidr(net.trunc()));
        }
        s.parse::<IpAddr>()
            .map(|ip| Cidr(IpNet::from(ip)))
            .map_err(|_| format!("{s:?} is neither a CIDR (10.0.0.0/8) nor an IP address"))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A host name (case-insensitive, without port) or `*.domain` for every
/// name under `domain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern(String);

impl FromStr for HostPattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let h = normalize_host(s);
        let bare = h.strip_prefix("*.").unwrap_or(&h);
        let valid = !bare.is_empty()
            && bare.len() <= 253
            && bare
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '_'));
        if valid {
            Ok(HostPattern(h))
        } else {
            Err(format!(
                "{s:?} is not a host name (example: registry.example, *.example)"
            ))
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl HostPattern {
    fn matches(&self, host: &str) -> bool {
        match self.0.strip_prefix("*.") {
            Some(domain) => host
                .strip_suffix(domain)
                .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1),
            None => self.0 == host,
        }
    }
}

/// Lower case, no IPv6 brackets, no trailing dot.
fn normalize_host(host: &str) -> String {
    let h = host.trim();
    let h = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(h);
    h.trim_end_matches('.').to_ascii_lowercase()
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    pub defaults: Defaults,
    pub allow_cidrs: Vec<Cidr>,
    pub deny_cidrs: Vec<Cidr>,
    pub allow_hosts: Vec<HostPattern>,
    pub deny_hosts: Vec<HostPattern>,
}

impl EgressPolicy {
    /// The webhook's and the controller's starting point.
    pub fn refuse_internal() -> Self {
        Self {
            defaults: Defaults::RefuseInternal,
            ..Self::default()
        }
    }

    fn host_denied(&self, host: &str) -> bool {
        self.deny_hosts.iter().any(|p| p.matches(host))
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.allow_hosts.iter().any(|p| p.matches(host))
    }

    /// Before resolving: refuse a denied name (addresses come later).
    pub fn check_name(&self, host: &str) -> Result<(), Refusal> {
        if self.host_denied(&normalize_host(host)) {
            return Err(Refusal::DeniedHost);
        }
        Ok(())
    }

    /// May `host` (as named in the URL) be reached at `ip`?
    pub fn check_addr(&self, host: &str, ip: IpAddr) -> Result<(), Refusal> {
        let host = normalize_host(host);
        if self.host_denied(&host) {
            return Err(Refusal::DeniedHost);
        }
        let forms = forms(ip);
        let forms = forms.iter().flatten();
        let in_any = |list: &[Cidr]| forms.clone().any(|f| list.iter().any(|c| c.0.contains(f)));
        if in_any(&self.deny_cidrs) {
            return Err(Refusal::DeniedCidr);
        }
        if self.host_allowed(&host) || in_any(&self.allow_cidrs) {
            return Ok(());
        }
        match self.defaults {
            Defaults::AllowAll => Ok(()),
            Defaults::RefuseInternal => match forms.clone().find_map(|f| internal(*f)) {
                Some(r) => Err(r),
                None => Ok(()),
            },
        }
    }

    /// A URL's host: an IP literal is checked as an address now (no
    /// resolver runs for it); a name is checked by name, its addresses when
    /// it is resolved.
    pub fn check_url_host(&self, host: &str) -> Result<(), Refusal> {
        match normalize_host(host).parse::<IpAddr>() {
            Ok(ip) => self.check_addr(host, ip),
            Err(_) => self.check_name(host),
        }
    }
}

/// The address and, for IPv6 forms that carry an IPv4 address the kernel
/// or a NAT64 gateway would connect to, that IPv4 address.
fn forms(ip: IpAddr) -> [Option<IpAddr>; 2] {
    let embedded = match ip {
        IpAddr::V4(_) => None,
        IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
    };
    [Some(ip), embedded]
}

/// `::ffff:a.b.c.d` (mapped), `::a.b.c.d` (compatible, deprecated but still
/// parsed) and `64:ff9b::a.b.c.d` (the NAT64 well-known prefix).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s[..6] {
        [0, 0, 0, 0, 0, 0xffff] | [0x64, 0xff9b, 0, 0, 0, 0] => Some(tail),
        // `::` and `::1` are IPv6's own unspecified and loopback.
        [0, 0, 0, 0, 0, 0] if s[6] != 0 => Some(tail),
        _ => None,
    }
}

/// The address families refused by `Defaults::RefuseInternal`.
fn internal(ip: IpAddr) -> Option<Refusal> {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4.is_loopback() {
                Some(Refusal::Loopback)
            } else if v4.is_link_local() {
                Some(Refusal::LinkLocal)
            } else if v4.octets()[0] == 0 {
                // 0.0.0.0/8 "this network": Linux connects 0.0.0.0 to itself.
                Some(Refusal::Unspecified)
            } else if v4.is_multicast() {
                Some(Refusal::Multicast)
            } else if v4.is_broadcast() {
                Some(Refusal::Broadcast)
            } else if v4.is_private() || (o[0] == 100 && (o[1] & 0xc0) == 64) {
                // RFC 1918, and 100.64.0.0/10 (shared, carrier-grade NAT;
                // some clusters' Service or pod ranges).
                Some(Refusal::Private)
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if v6.is_loopback() {
                Some(Refusal::Loopback)
            } else if v6.is_unspecified() {
                Some(Refusal::Unspecified)
            } else if v6.is_unicast_link_local() {
                Some(Refusal::LinkLocal)
            } else if v6.is_multicast() {
                Some(Refusal::Multicast)
            } else if v6.is_unique_local() {
                Some(Refusal::Private)
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    fn hosts(list: &[&str]) -> Vec<HostPattern> {
        list.iter().map(|h| h.parse().unwrap()).collect()
    }

    #[test]
    fn in_cluster_default_refuses_every_internal_family() {
        let p = EgressPolicy::refuse_internal();
        for (addr, why) in [
            ("127.0.0.1", Refusal::Loopback),
            ("127.255.0.9", Refusal::Loopback),
            ("::1", Refusal::Loopback),
            ("169.254.169.254", Refusal::LinkLocal),
            ("fe80::1", Refusal::LinkLocal),
            ("febf::1", Refusal::LinkLocal),
            ("0.0.0.0", Refusal::Unspecified),
            ("0.1.2.3", Refusal::Unspecified),
            ("::", Refusal::Unspecified),
            ("224.0.0.1", Refusal::Multicast),
            ("239.255.255.250", Refusal::Multicast),
            ("ff02::1", Refusal::Multicast),
            ("255.255.255.255", Refusal::Broadcast),
            ("10.96.0.1", Refusal::Private),
            ("172.16.0.1", Refusal::Private),
            ("172.31.255.254", Refusal::Private),
            ("192.168.1.1", Refusal::Private),
            ("100.64.0.1", Refusal::Private),
            ("100.127.255.254", Refusal::Private),
            ("fd00::1", Refusal::Private),
            ("fc00::1", Refusal::Private),
        ] {
            assert_eq!(p.check_addr("h", ip(addr)), Err(why), "{addr}");
        }
    }

    #[test]
    fn ipv6_forms_of_refused_ipv4_addresses_are_refused() {
        let p = EgressPolicy::refuse_internal();
        for (addr, why) in [
            ("::ffff:127.0.0.1", Refusal::Loopback),
            ("::ffff:7f00:2", Refusal::Loopback),
            ("::127.0.0.1", Refusal::Loopback),
            ("::ffff:169.254.169.254", Refusal::LinkLocal),
            ("64:ff9b::169.254.169.254", Refusal::LinkLocal),
            ("64:ff9b::127.0.0.1", Refusal::Loopback),
            ("::ffff:0.0.0.0", Refusal::Unspecified),
        ] {
            assert_eq!(p.check_addr("h", ip(addr)), Err(why), "{addr}");
        }
        // The mapped form of an address is judged as the address.
        assert_eq!(
            p.check_addr("h", ip("::ffff:10.77.0.1")),
            Err(Refusal::Private)
        );
        assert_eq!(
            p.check_addr("h", ip("64:ff9b::192.168.0.1")),
            Err(Refusal::Private)
        );
        assert_eq!(p.check_addr("h", ip("::ffff:192.0.2.1")), Ok(()));
    }

    #[test]
    fn public_ranges_and_the_edges_of_the_private_ones_stay_allowed() {
        let p = EgressPolicy::refuse_internal();
        for addr in [
            "2001:db8::1",
            "192.0.2.1",
            "8.8.8.8",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "11.0.0.1",
            "fe00::1",
        ] {
            assert_eq!(p.check_addr("registry", ip(addr)), Ok(()), "{addr}");
        }
    }

    #[test]
    fn a_private_registry_is_allowed_by_name_or_range_and_only_there() {
        let by_range = EgressPolicy {
            allow_cidrs: cidrs(&["10.77.0.1/32"]),
            ..EgressPolicy::refuse_internal()
        };
        assert_eq!(by_range.check_addr("harbor", ip("10.77.0.1")), Ok(()));
        assert_eq!(
            by_range.check_addr("harbor", ip("10.77.0.2")),
            Err(Refusal::Private),
            "the next address is still the cluster's"
        );
        let by_name = EgressPolicy {
            allow_hosts: hosts(&["harbor.corp.example"]),
            ..EgressPolicy::refuse_internal()
        };
        assert_eq!(
            by_name.check_addr("harbor.corp.example", ip("10.0.0.9")),
            Ok(())
        );
        assert_eq!(
            by_name.check_addr("kubelet.corp.example", ip("10.0.0.9")),
            Err(Refusal::Private)
        );
    }

    #[test]
    fn allow_all_default_refuses_only_what_is_denied() {
        let p = EgressPolicy::default();
        assert_eq!(p.check_addr("h", ip("127.0.0.1")), Ok(()));
        assert_eq!(p.check_addr("h", ip("169.254.169.254")), Ok(()));
        let p = EgressPolicy {
            deny_cidrs: cidrs(&["169.254.0.0/16"]),
            ..EgressPolicy::default()
        };
        assert_eq!(
            p.check_addr("h", ip("169.254.169.254")),
            Err(Refusal::DeniedCidr)
        );
        assert_eq!(
            p.check_addr("h", ip("::ffff:169.254.169.254")),
            Err(Refusal::DeniedCidr)
        );
    }

    #[test]
    fn allowed_cidr_lifts_a_default_refusal_and_deny_wins_over_allow() {
        let p = EgressPolicy {
            allow_cidrs: cidrs(&["127.0.0.0/8"]),
            deny_cidrs: cidrs(&["127.0.0.2"]),
            ..EgressPolicy::refuse_internal()
        };
        assert_eq!(p.check_addr("h", ip("127.0.0.1")), Ok(()));
        assert_eq!(p.check_addr("h", ip("::ffff:127.0.0.1")), Ok(()));
        assert_eq!(p.check_addr("h", ip("127.0.0.2")), Err(Refusal::DeniedCidr));
        assert_eq!(
            p.check_addr("h", ip("::ffff:127.0.0.2")),
            Err(Refusal::DeniedCidr)
        );
        // An allowed host does not lift a denied CIDR either.
        let p = EgressPolicy {
            allow_hosts: hosts(&["localhost"]),
            ..p
        };
        assert_eq!(
            p.check_addr("localhost", ip("127.0.0.2")),
            Err(Refusal::DeniedCidr)
        );
        // Nor a denied host, whatever its address.
        let p = EgressPolicy {
            deny_hosts: hosts(&["localhost"]),
            ..p
        };
        assert_eq!(
            p.check_addr("localhost", ip("127.0.0.1")),
            Err(Refusal::DeniedHost)
        );
        assert_eq!(p.check_name("LocalHost."), Err(Refusal::DeniedHost));
    }

    #[test]
    fn host_rules_are_case_insensitive_and_wildcards_need_a_label() {
        let p = EgressPolicy {
            allow_hosts: hosts(&["Registry.Local", "*.Cluster.Local"]),
            deny_hosts: hosts(&["evil.cluster.local"]),
            ..EgressPolicy::refuse_internal()
        };
        let lo = ip("127.0.0.1");
        assert_eq!(p.check_addr("REGISTRY.local", lo), Ok(()));
        assert_eq!(p.check_addr("registry.local.", lo), Ok(()));
        assert_eq!(p.check_addr("a.b.cluster.local", lo), Ok(()));
        assert_eq!(p.check_addr("cluster.local", lo), Err(Refusal::Loopback));
        assert_eq!(p.check_addr("xcluster.local", lo), Err(Refusal::Loopback));
        assert_eq!(
            p.check_addr("Evil.Cluster.Local", lo),
            Err(Refusal::DeniedHost)
        );
        assert_eq!(p.check_name("other.example"), Ok(()));
    }

    #[test]
    fn url_hosts_that_are_literals_are_checked_as_addresses() {
        let p = EgressPolicy::refuse_internal();
        assert_eq!(p.check_url_host("127.0.0.1"), Err(Refusal::Loopback));
        assert_eq!(p.check_url_host("[::1]"), Err(Refusal::Loopback));
        assert_eq!(
            p.check_url_host("[::ffff:169.254.169.254]"),
            Err(Refusal::LinkLocal)
        );
        // Names wait for their addresses.
        assert_eq!(p.check_url_host("localhost"), Ok(()));
        let p = EgressPolicy {
            allow_hosts: hosts(&["127.0.0.1"]),
            ..p
        };
        assert_eq!(p.check_url_host("127.0.0.1"), Ok(()));
    }

    #[test]
    fn rules_parse_with_clear_errors() {
        assert_eq!(
            "10.0.0.7/8".parse::<Cidr>().unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!("::1".parse::<Cidr>().unwrap().to_string(), "::1/128");
        let e = "10.0.0.0/33".parse::<Cidr>().unwrap_err();
        assert!(e.contains("neither a CIDR"), "{e}");
        let e = "bad host/x".parse::<HostPattern>().unwrap_err();
        assert!(e.contains("not a host name"), "{e}");
        assert!("*.".parse::<HostPattern>().is_err());
        assert_eq!("[::1]".parse::<HostPattern>().unwrap().to_string(), "::1");
    }
}
