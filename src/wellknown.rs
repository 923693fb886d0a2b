//! Names nfguard shares with the rest of the cluster, each said once: the
//! workload kinds it judges (where their pod template lives, the API
//! resource the webhook matches) and its label, taint and annotation keys.
//! Users select, tolerate and alert on these: never rename one.

use crate::named::named_enum;

/// The prefix of every key nfguard owns.
pub const PREFIX: &str = "nfguard.io/";

/// Node label: the backend the node's rules live in (`nft`, `legacy`).
pub const LABEL_BACKEND: &str = "nfguard.io/iptables-backend";
/// Node label: the host's iptables release.
pub const LABEL_VERSION: &str = "nfguard.io/iptables-version";
/// Node label: the oldest iptables that can read the node's live rules.
pub const LABEL_MIN_READER: &str = "nfguard.io/min-reader";
/// Every node label the controller manages.
pub const MANAGED_LABELS: [&str; 3] = [LABEL_BACKEND, LABEL_VERSION, LABEL_MIN_READER];

/// Node taint `=<hazard code>:NoSchedule` on a node with a critical hazard.
pub const TAINT_DEGRADED: &str = "nfguard.io/netfilter-degraded";
/// Node taint `:NoSchedule` on a node running a workload that violates a
/// policy with `action: Taint`.
pub const TAINT_INCOMPATIBLE: &str = "nfguard.io/iptables-incompatible";

/// `nfguard.io/exempt: "<reason>"` on a workload (or its pod template).
pub const ANNOTATION_EXEMPT: &str = "nfguard.io/exempt";

/// Label on every policy report nfguard writes (it lists its own by it).
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "nfguard";
/// Report annotation: the hash of the report's content (write only on change).
pub const ANNOTATION_REPORT_HASH: &str = "nfguard.io/report-hash";
/// Report annotation, only when results were left out: how many.
pub const ANNOTATION_RESULTS_LEFT_OUT: &str = "nfguard.io/results-left-out";

named_enum! {
    /// The kinds whose pods nfguard judges.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
    pub enum WorkloadKind {
        Pod,
        DaemonSet,
        Deployment,
        StatefulSet,
        ReplicaSet,
        ReplicationController,
        Job,
        CronJob,
    }
}

/// Where a kind keeps the pod it runs.
#[derive(Clone, Copy, Debug)]
pub struct PodTemplatePath {
    /// From the object to the pod spec, key by key.
    pub spec: &'static [&'static str],
    /// The same as a JSON pointer.
    pub spec_pointer: &'static str,
    /// JSON pointer to the pod (template)'s metadata.
    pub metadata_pointer: &'static str,
}

impl WorkloadKind {
    pub const fn pod_template(self) -> PodTemplatePath {
        match self {
            Self::Pod => PodTemplatePath {
                spec: &["spec"],
                spec_pointer: "/spec",
                metadata_pointer: "/metadata",
            },
            Self::CronJob => PodTemplatePath {
                spec: &["spec", "jobTemplate", "spec", "template", "spec"],
                spec_pointer: "/spec/jobTemplate/spec/template/spec",
                metadata_pointer: "/spec/jobTemplate/spec/template/metadata",
            },
            Self::DaemonSet
            | Self::Deployment
            | Self::StatefulSet
            | Self::ReplicaSet
            | Self::ReplicationController
            | Self::Job => PodTemplatePath {
                spec: &["spec", "template", "spec"],
                spec_pointer: "/spec/template/spec",
                metadata_pointer: "/spec/template/metadata",
            },
        }
    }

    /// The API group ("" for core) and resource the webhook's rules name.
    pub const fn group_resource(self) -> (&'static str, &'static str) {
        match self {
            Self::Pod => ("", "pods"),
            Self::ReplicationController => ("", "replicationcontrollers"),
            Self::DaemonSet => ("apps", "daemonsets"),
            Self::Deployment => ("apps", "deployments"),
            Self::StatefulSet => ("apps", "statefulsets"),
            Self::ReplicaSet => ("apps", "replicasets"),
            Self::Job => ("batch", "jobs"),
            Self::CronJob => ("batch", "cronjobs"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_nfguards_own() {
        for k in MANAGED_LABELS.into_iter().chain([
            TAINT_DEGRADED,
            TAINT_INCOMPATIBLE,
            ANNOTATION_EXEMPT,
        ]) {
            assert!(k.starts_with(PREFIX), "{k}");
        }
    }

    #[test]
    fn the_spec_pointer_is_the_spec_path() {
        for kind in WorkloadKind::ALL {
            let t = kind.pod_template();
            assert_eq!(t.spec_pointer, format!("/{}", t.spec.join("/")), "{kind}");
            let template = t.spec_pointer.strip_suffix("/spec").unwrap_or("");
            assert_eq!(t.metadata_pointer, format!("{template}/metadata"), "{kind}");
        }
    }

    /// The webhook configuration of both installs names exactly these
    /// resources (so a kind added here is matched, and none is matched that
    /// nfguard cannot judge), and the ephemeral containers subresource.
    #[test]
    fn the_webhook_rules_name_every_kind_and_no_other() {
        let dir = env!("CARGO_MANIFEST_DIR");
        for file in [
            "manifests/webhook-configuration.yaml",
            "charts/nfguard/templates/webhook-configuration.yaml",
        ] {
            let text = std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
            let mut named: Vec<&str> = text
                .lines()
                .filter_map(|l| l.trim().strip_prefix("resources: ["))
                .flat_map(|l| l.trim_end_matches(']').split(','))
                .map(|r| r.trim().trim_matches('"'))
                .collect();
            named.sort();
            // A ReplicationController is judged through its pods only
            // (docs/webhook.md): its template may be absent, which the
            // matchConditions' CEL would turn into an error.
            let mut want: Vec<&str> = WorkloadKind::ALL
                .iter()
                .filter(|k| **k != WorkloadKind::ReplicationController)
                .map(|k| k.group_resource().1)
                .collect();
            want.push("pods/ephemeralcontainers");
            want.sort();
            assert_eq!(named, want, "{file}");
        }
    }
}
