//! What every reader of a reason code needs to know about it, kept with the
//! code: its class (what callers do with it), the severity the docs promise,
//! a one-sentence summary (SARIF rules, tooltips) and when it is given (the
//! docs' table, which a test keeps equal to [`docs_table`]). The per-finding
//! message and remedy stay in `render.rs`: they need the finding's facts.
//!
//! A new reason code: its variant in `ReasonCode`, its arm here (the match is
//! exhaustive, so the compiler asks), its message in `render.rs`.

use super::ReasonCode;

/// What a reason means for the workload; callers decide by class, never by
/// listing codes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ReasonClass {
    /// The workload's iptables would break the node's networking (or may):
    /// follows the policy's `action`; the controller taints for critical ones.
    Unsafe,
    /// The judgement lacked a fact (image, node profile): follows the
    /// policy's `unresolvedImages`; JUnit reports these as errors.
    CannotEvaluate,
    /// An override was asked for (honoured or not): the webhook always shows
    /// it as a warning, so the person who asked sees what became of it.
    Exemption,
    /// Context that never denies on its own account.
    Info,
}

/// The metadata of one reason code.
#[derive(Clone, Copy, Debug)]
pub struct ReasonMeta {
    pub class: ReasonClass,
    /// The severities it can carry, as the docs say them.
    pub severity: &'static str,
    /// One sentence.
    pub summary: &'static str,
    /// When it is given (Markdown).
    pub when: &'static str,
}

const fn meta(
    class: ReasonClass,
    severity: &'static str,
    summary: &'static str,
    when: &'static str,
) -> ReasonMeta {
    ReasonMeta {
        class,
        severity,
        summary,
        when,
    }
}

impl ReasonCode {
    pub const fn meta(self) -> ReasonMeta {
        use ReasonClass::*;
        use ReasonCode::*;
        match self {
            KnownBadIptables => meta(
                Unsafe,
                "critical",
                "The image's iptables is 1.8.0-1.8.3 (broken -C, endless duplicate rules).",
                "image iptables 1.8.0-1.8.3",
            ),
            BackendMismatch => meta(
                Unsafe,
                "critical",
                "The image writes through the other iptables backend than the node's rules.",
                "image (wrapper resolved) writes the other backend than the node's rules",
            ),
            KernelLacksBackend => meta(
                Unsafe,
                "critical",
                "The node's kernel lacks the backend the image writes through.",
                "the node's kernel lacks nf_tables / ip_tables for the image's backend (`absent`: \
                 not loaded, not built in, no module installed; see \
                 [kernel modules](node-inspection.md#kernel-modules))",
            ),
            OldReaderNewRules => meta(
                Unsafe,
                "critical",
                "The image's iptables-nft (<= 1.8.7) cannot read the native expressions the node's \
                 rules hold or its writers emit.",
                "image nft <= 1.8.7 and (live rules need a newer reader, or a writer >= 1.8.8) — \
                 the incident",
            ),
            NewWriterOldReader => meta(
                Unsafe,
                "critical / warning",
                "The image (>= 1.8.8) writes native expressions an older reader on the node misreads.",
                "image nft >= 1.8.8 and a writer pod <= 1.8.7 saves/restores (critical); only the \
                 host's tools are <= 1.8.7 (warning: corrupts only if the host saves/restores)",
            ),
            ReaderOlderThanWriter => meta(
                Unsafe,
                "warning",
                "The image's iptables is older than the newest writer of the node's rules.",
                "both >= 1.8.8, image older than the newest writer or `minReaderVersion`",
            ),
            WrapperNoMarkerChains => meta(
                Unsafe,
                "warning",
                "iptables-wrapper on a node without kubelet's marker chains defaults to nft.",
                "iptables-wrapper on a node without KUBE-IPTABLES-HINT / KUBE-KUBELET-CANARY (it \
                 defaults to nft)",
            ),
            PodBackendMismatch => meta(
                Unsafe,
                "critical",
                "Containers of one pod use different iptables backends.",
                "containers of one pod use different backends",
            ),
            PodOldReaderNewWriter => meta(
                Unsafe,
                "critical",
                "In one pod, an iptables-nft <= 1.8.7 reads what a >= 1.8.8 one writes.",
                "in one pod, an nft <= 1.8.7 and an nft >= 1.8.8",
            ),
            PodReaderOlderThanWriter => meta(
                Unsafe,
                "warning",
                "In one pod, two different iptables-nft >= 1.8.8.",
                "in one pod, two different nft >= 1.8.8",
            ),
            ImageUnresolved => meta(
                CannotEvaluate,
                "per `unresolvedImages`",
                "The image could not be inspected.",
                "cannot evaluate: the registry did not answer in time, refused, or the image is \
                 not readable",
            ),
            ImageVersionUnknown => meta(
                CannotEvaluate,
                "per `unresolvedImages`",
                "The image's iptables release could not be determined.",
                "cannot evaluate: the image has an iptables command of an unknown release",
            ),
            NoIptables => meta(
                Info,
                "info",
                "The image has no iptables command.",
                "reported, never denies: the image has no iptables command",
            ),
            NodeProfileIncomplete => meta(
                CannotEvaluate,
                "per `unresolvedImages`",
                "The node's NodeNetfilterProfile has no usable status.",
                "cannot evaluate: the node's profile has no usable status (reporter not run yet, \
                 probe failed)",
            ),
            NodeProfileMissing => meta(
                CannotEvaluate,
                "per `unresolvedImages`",
                "A candidate node has no NodeNetfilterProfile.",
                "cannot evaluate: a candidate Node has no NodeNetfilterProfile",
            ),
            NodeHazard => meta(
                Info,
                "info",
                "The node has a netfilter hazard of its own.",
                "reported, never denies: the node's own critical hazard (e.g. \
                 `FirewallUnconditionalDrop`), not the workload's fault",
            ),
            HostNetworkWithoutNetAdmin => meta(
                Info,
                "info",
                "hostNetwork without NET_ADMIN cannot write the node's rules.",
                "reported, never denies: hostNetwork without NET_ADMIN, ALL or privileged",
            ),
            Exempt => meta(
                Exemption,
                "info",
                "The workload is exempt (nfguard.io/exempt).",
                "reported, never denies: `nfguard.io/exempt` honoured (a NetfilterPolicy's \
                 `exemptionNamespaceSelector` selects the namespace)",
            ),
            ImageExempt => meta(
                Exemption,
                "info",
                "The image matches a policy exemptImages pattern.",
                "reported, never denies: the image matches a policy's `exemptImages`",
            ),
            NamespaceNotSelected => meta(
                Info,
                "info",
                "No NetfilterPolicy selects the namespace.",
                "reported, never denies: no NetfilterPolicy selects the namespace",
            ),
            NoCandidateNodes => meta(
                Info,
                "warning",
                "No node profile matches the pod's scheduling constraints.",
                "nothing matches the pod's scheduling constraints",
            ),
            InvalidPolicyIgnored => meta(
                Info,
                "warning",
                "An invalid NetfilterPolicy selecting the namespace was ignored.",
                "an invalid NetfilterPolicy selecting the namespace was left out (webhook and \
                 controller; `nfguard check` refuses the policy with exit 2 instead)",
            ),
            ExemptionNotAllowed => meta(
                Exemption,
                "info",
                "nfguard.io/exempt was ignored: no NetfilterPolicy allows exemptions in the namespace.",
                "reported, never denies by itself: `nfguard.io/exempt` ignored, no NetfilterPolicy \
                 allows exemptions in the namespace (the workload is judged anyway)",
            ),
            NftNewWriterOldReader => meta(
                Unsafe,
                "critical / warning",
                "The image's libnftables (>= 1.1.2) writes set userdata that an unfixed older nft on \
                 the node segfaults on.",
                "image libnftables >= 1.1.2 and a reader on the node is unfixed and older than 1.1.2: \
                 a writer pod's nft, or the host's when kube-proxy runs there in nftables mode \
                 (critical); only the host's own nft otherwise (warning) — the incident of 2026, see \
                 [nft skew](nft-skew.md)",
            ),
            NftOldReaderNewSets => meta(
                Unsafe,
                "critical",
                "The image's unfixed nft segfaults on the node's live sets or on what its writers \
                 write.",
                "image nft unfixed and (the node's live sets need a newer reader, or a writer pod's \
                 libnftables >= 1.1.2 writes them) — see [nft skew](nft-skew.md)",
            ),
            JudgementTimedOut => meta(
                CannotEvaluate,
                "per `unresolvedImages`",
                "The webhook's judgement did not finish within its answer budget.",
                "cannot evaluate (webhook only): judging did not finish within the answer budget \
                 (`--timeout`); `unresolvedImages: Deny` denies, `Warn` and `Allow` admit with a \
                 warning, never silently (see [webhook](webhook.md#failure-policy))",
            ),
        }
    }
}

/// The docs' table of reason codes (docs/check.md, between the
/// `reason-codes` markers), one row per code in declaration order.
pub fn docs_table() -> String {
    let mut s = String::from("| code | severity | when |\n|---|---|---|\n");
    for code in ReasonCode::ALL {
        let m = code.meta();
        s.push_str(&format!("| `{code}` | {} | {} |\n", m.severity, m.when));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_summary_is_one_sentence_and_every_when_one_line() {
        for code in ReasonCode::ALL {
            let m = code.meta();
            assert!(m.summary.ends_with('.'), "{code}: {}", m.summary);
            assert!(
                !m.summary.contains('\n') && !m.when.contains('\n'),
                "{code}"
            );
            assert!(!m.when.contains('|'), "{code}: a table cell");
            assert!(
                !m.when.contains("  "),
                "{code}: a line continuation left spaces"
            );
        }
    }

    #[test]
    fn the_unresolved_policy_governs_exactly_the_cannot_evaluate_class() {
        for code in ReasonCode::ALL {
            let m = code.meta();
            assert_eq!(
                m.class == ReasonClass::CannotEvaluate,
                m.severity == "per `unresolvedImages`",
                "{code}"
            );
        }
    }
}

#[cfg(test)]
mod docs_drift {
    /// docs/check.md's table is [`super::docs_table`]; NFGUARD_UPDATE_DOCS=1
    /// rewrites it.
    #[test]
    fn the_docs_table_of_reason_codes_is_generated_from_the_metadata() {
        crate::docs_block::check_generated_block(
            "docs/check.md",
            "<!-- reason-codes:begin",
            "<!-- reason-codes:end -->",
            &super::docs_table(),
            "cargo test --lib reason_meta",
        );
    }
}
