//! From a running pod to the workload its report belongs to: DaemonSet,
//! StatefulSet, Deployment (via its ReplicaSet), CronJob (via its Job), Job,
//! any other controller, or the bare Pod. Pure: the controller answers the
//! one question that needs its stores ("who controls this ReplicaSet / Job?")
//! through a closure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// One object a report can be about or owned by: what an owner reference
/// names (the namespace is the pod's: owners are never cross-namespace).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

impl ObjectId {
    /// The controlling owner among `refs` (the one with `controller: true`;
    /// Kubernetes allows at most one).
    pub fn controller_of(refs: Option<&[OwnerReference]>) -> Option<ObjectId> {
        refs?
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| ObjectId {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
            })
    }

    /// The API group: `apps` of `apps/v1`, "" for the core group's `v1`.
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    /// An owner reference to this object for a report it owns. Neither
    /// `controller` (the report is not the workload's to control) nor
    /// `blockOwnerDeletion` (that needs update rights on the workload's
    /// finalizers): the garbage collector deletes the report after its owner.
    pub fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            ..Default::default()
        }
    }
}

/// What the controller's store says of an intermediate object's controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parent {
    /// The object is known and has this controller.
    Controller(ObjectId),
    /// The object is known and nothing controls it.
    None,
    /// The object is not in the store (yet): the pod's top owner is unknown.
    Unknown,
}

/// A running pod as its report needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// From the pod's owner references ([`ObjectId::controller_of`]).
    pub controller: Option<ObjectId>,
}

impl PodRef {
    /// The pod itself as an [`ObjectId`].
    pub fn id(&self) -> ObjectId {
        ObjectId {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OwnerError {
    /// Resolve again once the store has it; reporting under the
    /// intermediate object meanwhile would move results between reports.
    #[error("{kind} {namespace}/{name} is not known yet: the pod's workload cannot be resolved")]
    ParentUnknown {
        kind: String,
        namespace: String,
        name: String,
    },
}

/// Whether `id` is a ReplicaSet or Job: the kinds a higher workload
/// (Deployment, CronJob, or a custom controller) usually creates.
fn is_intermediate(id: &ObjectId) -> bool {
    matches!(
        (id.group(), id.kind.as_str()),
        ("apps", "ReplicaSet") | ("batch", "Job")
    )
}

/// The workload `pod`'s report belongs to. A ReplicaSet or Job resolves to
/// its own controller when it has one (one hop: a Deployment or CronJob is
/// never controlled by another workload nfguard reports on); any other
/// controller is the workload itself; no controller: the bare pod.
pub fn resolve_owner(
    pod: &PodRef,
    parent_of: impl Fn(&ObjectId) -> Parent,
) -> Result<ObjectId, OwnerError> {
    let Some(controller) = &pod.controller else {
        return Ok(pod.id());
    };
    if !is_intermediate(controller) {
        return Ok(controller.clone());
    }
    match parent_of(controller) {
        Parent::Controller(top) => Ok(top),
        Parent::None => Ok(controller.clone()),
        Parent::Unknown => Err(OwnerError::ParentUnknown {
            kind: controller.kind.clone(),
            namespace: pod.namespace.clone(),
            name: controller.name.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(api_version: &str, kind: &str, name: &str) -> ObjectId {
        ObjectId {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn pod(controller: Option<ObjectId>) -> PodRef {
        PodRef {
            namespace: "ns".into(),
            name: "p-1".into(),
            uid: "uid-p-1".into(),
            controller,
        }
    }

    /// A store that knows `known` (intermediate, its controller).
    fn store(known: Vec<(ObjectId, Option<ObjectId>)>) -> impl Fn(&ObjectId) -> Parent {
        move |o| match known.iter().find(|(k, _)| k == o) {
            Some((_, Some(top))) => Parent::Controller(top.clone()),
            Some((_, None)) => Parent::None,
            None => Parent::Unknown,
        }
    }

    fn never_asked(o: &ObjectId) -> Parent {
        panic!("asked for the parent of {o:?}")
    }

    #[test]
    fn a_pod_without_controller_is_its_own_workload() {
        let p = pod(None);
        assert_eq!(resolve_owner(&p, never_asked), Ok(id("v1", "Pod", "p-1")));
    }

    #[test]
    fn daemonsets_statefulsets_and_custom_controllers_are_the_workload() {
        for top in [
            id("apps/v1", "DaemonSet", "ds"),
            id("apps/v1", "StatefulSet", "sts"),
            id("example.com/v1", "Operator", "op"),
            // A kind named like an intermediate but of another group.
            id("example.com/v1", "ReplicaSet", "foreign"),
        ] {
            let p = pod(Some(top.clone()));
            assert_eq!(resolve_owner(&p, never_asked), Ok(top));
        }
    }

    #[test]
    fn a_deployments_pod_resolves_through_its_replicaset() {
        let rs = id("apps/v1", "ReplicaSet", "web-5d4f");
        let deploy = id("apps/v1", "Deployment", "web");
        let p = pod(Some(rs.clone()));
        let got = resolve_owner(&p, store(vec![(rs, Some(deploy.clone()))]));
        assert_eq!(got, Ok(deploy));
    }

    #[test]
    fn a_cronjobs_pod_resolves_through_its_job_and_a_bare_job_is_the_workload() {
        let job = id("batch/v1", "Job", "backup-2911");
        let cron = id("batch/v1", "CronJob", "backup");
        let p = pod(Some(job.clone()));
        let got = resolve_owner(&p, store(vec![(job.clone(), Some(cron.clone()))]));
        assert_eq!(got, Ok(cron));
        let got = resolve_owner(&p, store(vec![(job.clone(), None)]));
        assert_eq!(got, Ok(job));
    }

    #[test]
    fn a_bare_replicaset_is_the_workload() {
        let rs = id("apps/v1", "ReplicaSet", "lonely");
        let p = pod(Some(rs.clone()));
        assert_eq!(resolve_owner(&p, store(vec![(rs.clone(), None)])), Ok(rs));
    }

    #[test]
    fn an_intermediate_not_in_the_store_is_an_error_not_a_guess() {
        let p = pod(Some(id("apps/v1", "ReplicaSet", "web-5d4f")));
        let err = resolve_owner(&p, store(vec![])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ReplicaSet ns/web-5d4f is not known yet: the pod's workload cannot be resolved"
        );
    }

    #[test]
    fn the_controller_is_the_reference_marked_controller() {
        let refs = vec![
            OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "not-me".into(),
                uid: "u0".into(),
                ..Default::default()
            },
            OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: "ds".into(),
                uid: "u1".into(),
                controller: Some(true),
                ..Default::default()
            },
        ];
        let c = ObjectId::controller_of(Some(&refs)).unwrap();
        assert_eq!((c.kind.as_str(), c.uid.as_str()), ("DaemonSet", "u1"));
        assert_eq!(ObjectId::controller_of(Some(&refs[..1])), None);
        assert_eq!(ObjectId::controller_of(None), None);
    }

    #[test]
    fn the_reports_owner_reference_names_the_workload_and_claims_no_control() {
        let r = id("apps/v1", "DaemonSet", "ds").owner_reference();
        assert_eq!(
            (r.api_version.as_str(), r.kind.as_str(), r.name.as_str()),
            ("apps/v1", "DaemonSet", "ds")
        );
        assert_eq!(r.uid, "uid-ds");
        assert_eq!((r.controller, r.block_owner_deletion), (None, None));
        assert_eq!(id("v1", "Pod", "p").group(), "");
    }
}
