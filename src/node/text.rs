//! Human-readable `inspect node` output: hazards first, then the facts.

use crate::api::NodeNetfilterProfileStatus;
use std::fmt::Write;

pub fn render(s: &NodeNetfilterProfileStatus) -> String {
    let mut o = String::new();
    let hazards = s.hazards.as_deref().unwrap_or(&[]);
    if hazards.is_empty() {
        o.push_str("Hazards: none\n");
    } else {
        let _ = writeln!(o, "Hazards ({}):", hazards.len());
        for h in hazards {
            let _ = writeln!(o, "  [{:?}] {}: {}", h.severity, h.code, h.message).map(|_| ());
        }
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "Active backend:    {}",
        s.active_backend.map_or("unknown", |b| b.as_str())
    );
    if let Some(m) = s.kube_proxy_mode {
        let _ = writeln!(o, "kube-proxy mode:   {}", m.as_str());
    }
    if let Some(m) = &s.kubelet_markers {
        let _ = writeln!(
            o,
            "Kubelet markers:   {}{}",
            m.state.as_str(),
            m.reason
                .as_deref()
                .map_or(String::new(), |r| format!(" ({r})"))
        );
    }
    if let Some(w) = s.wrapper_backend {
        let _ = writeln!(o, "Wrapper would use: {w}");
    }
    let min = match (s.min_reader_version, &s.native_features) {
        (Some(v), _) => format!("iptables-nft >= {v}"),
        (None, Some(_)) => "any iptables-nft (only xt-compat expressions)".to_string(),
        (None, None) => "unknown (nf_tables not read)".to_string(),
    };
    let _ = writeln!(o, "Min safe reader:   {min}");
    match &s.iptables {
        Some(i) => {
            let _ = writeln!(
                o,
                "Host iptables:     {} ({})",
                i.version
                    .map_or("unknown version".into(), |v| v.to_string()),
                i.backend
                    .map_or("no iptables command".into(), |b| b.to_string())
            );
        }
        None => o.push_str("Host iptables:     not found in the host root\n"),
    }
    if let Some(n) = &s.nftables {
        nftables(&mut o, n);
    }
    if let Some(k) = &s.kernel {
        let _ = match &k.modules {
            Some(m) => writeln!(
                o,
                "Kernel:            {} (nf_tables: {}, nft_compat: {}, ip_tables: {}, ip6_tables: {})",
                k.release,
                m.nf_tables.as_str(),
                m.nft_compat.as_str(),
                m.ip_tables.as_str(),
                m.ip6_tables.as_str()
            ),
            None => writeln!(
                o,
                "Kernel:            {} (nf_tables: {}, ip_tables: {})",
                k.release,
                yes(k.nf_tables),
                yes(k.ip_tables)
            ),
        };
    }
    if let Some(m) = s.kernel.as_ref().and_then(|k| k.modules.as_ref()) {
        let absent = super::xt_modules::absent(&m.xt);
        if !absent.is_empty() {
            let names: Vec<&str> = absent.iter().map(|e| e.module).collect();
            let _ = writeln!(o, "  absent xt:       {}", names.join(", "));
        }
    }
    if let Some(b) = &s.backends {
        o.push_str("Backends:\n");
        for (name, f) in [("nft", &b.nft), ("legacy", &b.legacy)] {
            let _ = writeln!(
                o,
                "  {name:<7} tables {:>3}  chains {:>5}  rules {:>7}  hint {}  canary {}{}",
                f.tables,
                f.chains,
                f.rules,
                yes(f.hint_chain),
                yes(f.canary_chain),
                if f.marker_tables.is_empty() {
                    String::new()
                } else {
                    format!("  (markers in {})", f.marker_tables.join(", "))
                }
            );
        }
    }
    for f in s.native_features.as_deref().unwrap_or(&[]) {
        let _ = writeln!(
            o,
            "Native feature:    {} in {} rules (e.g. {}), min reader {}",
            f.feature,
            f.rules,
            f.example,
            f.min_reader.map_or("any".into(), |v| v.to_string())
        );
    }
    native_tables(&mut o, s);
    if let Some(b) = &s.bridge {
        let _ = writeln!(
            o,
            "Bridge:            br_netfilter {}, bridge-nf-call-iptables {}, bridge-nf-call-ip6tables {}",
            yes(b.br_netfilter),
            yes(b.call_iptables),
            yes(b.call_ip6tables)
        );
    }
    if let Some(f) = s.ip_forward {
        let _ = writeln!(o, "IPv4 forwarding:   {}", yes(f));
    }
    if let Some(e) = &s.probe_error {
        let _ = writeln!(o, "Probe error:       {e}");
    }
    o
}

fn native_tables(o: &mut String, s: &NodeNetfilterProfileStatus) {
    let Some(tables) = &s.native_tables else {
        return;
    };
    if tables.is_empty() {
        o.push_str("Native tables:     none\n");
        return;
    }
    o.push_str("Native tables:\n");
    for t in tables {
        let _ = writeln!(
            o,
            "  {:<20} chains {:>5}  rules {:>7}  sets {:>4}",
            format!("{}/{}", t.family, t.name),
            t.chains,
            t.rules,
            t.sets
        );
    }
    if let Some(n) = s.native_tables_not_listed {
        let _ = writeln!(o, "  ... and {n} more");
    }
}

/// The host's libnftables and what the live sets ask of `nft` readers.
fn nftables(o: &mut String, n: &crate::api::NodeNftables) {
    let host = match &n.host {
        Some(h) => format!(
            "{}{}{}",
            h.version
                .map_or("unknown version".into(), |v| v.to_string()),
            h.package_version
                .as_deref()
                .map_or(String::new(), |p| format!(" (package {p})")),
            h.userdata_reader
                .map_or(String::new(), |r| format!(", set userdata reader: {r}"))
        ),
        None => "not found in the host root".into(),
    };
    let _ = writeln!(o, "Host nftables:     {host}");
    let need = match (n.crashing_sets, n.fixed_reader_required, n.min_reader) {
        (None, _, _) => "unknown (nf_tables not read)".to_string(),
        (Some(_), true, _) => "only builds with the fix (1.1.4+, 1.0.6.1)".to_string(),
        (Some(_), false, Some(v)) => format!("libnftables >= {v} or a build with the fix"),
        (Some(_), false, None) => "any".to_string(),
    };
    let _ = writeln!(o, "Min nft reader:    {need}");
    if let Some(c) = n.crashing_sets.filter(|c| *c > 0) {
        let _ = writeln!(
            o,
            "  {c} set(s) crash older readers: {}",
            n.crashing_examples.join(", ")
        );
    }
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{KubeProxyMode, KubeletMarkers, MarkerState, NativeTable};

    #[test]
    fn shows_native_tables_kube_proxy_mode_and_marker_state() {
        let s = NodeNetfilterProfileStatus {
            native_tables: Some(vec![NativeTable {
                family: "ip".into(),
                name: "kube-proxy".into(),
                chains: 12,
                rules: 30,
                sets: 9,
            }]),
            native_tables_not_listed: Some(3),
            kube_proxy_mode: Some(KubeProxyMode::Nftables),
            kubelet_markers: Some(KubeletMarkers {
                state: MarkerState::NotExpected,
                reason: Some("no iptables".into()),
            }),
            ..Default::default()
        };
        let t = render(&s);
        assert!(t.contains("kube-proxy mode:   nftables"), "{t}");
        assert!(
            t.contains("Kubelet markers:   notExpected (no iptables)"),
            "{t}"
        );
        assert!(
            t.contains("  ip/kube-proxy        chains    12  rules      30  sets    9"),
            "{t}"
        );
        assert!(t.contains("... and 3 more"), "{t}");
        let none = render(&NodeNetfilterProfileStatus {
            native_tables: Some(vec![]),
            ..Default::default()
        });
        assert!(none.contains("Native tables:     none"), "{none}");
    }
}
