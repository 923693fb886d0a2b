//! Who controls a ReplicaSet or a Job: what a policy report needs to put a
//! Deployment's or CronJob's pods under their workload
//! ([`crate::reports::resolve_owner`]). Metadata-only stores, slimmed to
//! the name, uid and controlling owner reference (a few fields per object,
//! however large the object), fed by watches like the other caches.

use crate::reports::{ObjectId, Parent};
use crate::runtime::watch::{Listed, MarkListed, listed_flag};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher::Event;

pub type ReplicaSetMeta = PartialObjectMeta<ReplicaSet>;
pub type JobMeta = PartialObjectMeta<Job>;

/// The read side: ReplicaSets' and Jobs' controllers. Cheap to clone.
#[derive(Clone)]
pub struct Parents {
    replica_sets: Store<ReplicaSetMeta>,
    jobs: Store<JobMeta>,
    /// Both kinds' first lists (the caches' flag, not the stores' own
    /// single-waiter readiness: `runtime::watch::Listed`).
    first_lists: [Listed; 2],
}

/// The write side, one per watched kind.
pub struct ParentFeeds {
    pub replica_sets: ParentFeed<ReplicaSet>,
    pub jobs: ParentFeed<Job>,
}

impl ParentFeeds {
    /// Feed both kinds' first list, as the watches do at start (tests and
    /// benchmarks fill the stores this way).
    pub fn list(&mut self, replica_sets: Vec<ReplicaSetMeta>, jobs: Vec<JobMeta>) {
        for e in crate::controller::cache::stores::listed(replica_sets) {
            self.replica_sets.feed(e);
        }
        for e in crate::controller::cache::stores::listed(jobs) {
            self.jobs.feed(e);
        }
    }
}

/// Empty stores and their feeds.
pub fn parents() -> (Parents, ParentFeeds) {
    let (replica_sets, rs_writer) = reflector::store::<ReplicaSetMeta>();
    let (jobs, job_writer) = reflector::store::<JobMeta>();
    let (rs_listed, rs_first) = listed_flag();
    let (job_listed, job_first) = listed_flag();
    (
        Parents {
            replica_sets,
            jobs,
            first_lists: [rs_first, job_first],
        },
        ParentFeeds {
            replica_sets: ParentFeed {
                writer: rs_writer,
                listed: rs_listed,
            },
            jobs: ParentFeed {
                writer: job_writer,
                listed: job_listed,
            },
        },
    )
}

impl Parents {
    /// Both stores have their first list (before it, every Deployment's pod
    /// would wait as `ParentUnknown`).
    pub fn listed(&self) -> bool {
        self.first_lists.iter().all(Listed::is_listed)
    }

    /// What the stores say of `id`'s controller, in `namespace`. Only
    /// ReplicaSets (`apps`) and Jobs (`batch`) are asked about.
    pub fn parent_of(&self, namespace: &str, id: &ObjectId) -> Parent {
        let meta = match (id.group(), id.kind.as_str()) {
            ("apps", "ReplicaSet") => self
                .replica_sets
                .get(&ObjectRef::new(&id.name).within(namespace))
                .map(|o| o.metadata.clone()),
            ("batch", "Job") => self
                .jobs
                .get(&ObjectRef::new(&id.name).within(namespace))
                .map(|o| o.metadata.clone()),
            _ => None,
        };
        match meta {
            // A same-named object re-created meanwhile is not the pod's.
            Some(m) if m.uid.as_deref() == Some(id.uid.as_str()) => {
                match ObjectId::controller_of(m.owner_references.as_deref()) {
                    Some(top) => Parent::Controller(top),
                    None => Parent::None,
                }
            }
            _ => Parent::Unknown,
        }
    }
}

/// A ReplicaSet's or Job's metadata cut to what [`Parents::parent_of`]
/// reads: name, namespace, uid, resourceVersion and the controlling owner
/// reference.
fn slim<K>(o: PartialObjectMeta<K>) -> PartialObjectMeta<K> {
    let m = o.metadata;
    let controller = m
        .owner_references
        .map(|refs| {
            refs.into_iter()
                .filter(|r| r.controller == Some(true))
                .collect::<Vec<_>>()
        })
        .filter(|refs| !refs.is_empty());
    PartialObjectMeta {
        types: o.types,
        metadata: kube::api::ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            owner_references: controller,
            ..Default::default()
        },
        _phantom: Default::default(),
    }
}

/// One kind's store writer.
pub struct ParentFeed<K: 'static>
where
    PartialObjectMeta<K>: kube::Resource<DynamicType = ()> + Clone,
{
    writer: Writer<PartialObjectMeta<K>>,
    listed: MarkListed,
}

impl<K> ParentFeed<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
    PartialObjectMeta<K>: kube::Resource<DynamicType = ()> + Clone,
{
    /// Apply one event; the object (as an [`ObjectId`] in its namespace)
    /// whose pods' workload may have changed: a new one resolves pods that
    /// waited for it, a changed controller moves them.
    pub fn feed(&mut self, event: Event<PartialObjectMeta<K>>) -> Option<(String, ObjectId)> {
        let event = match event {
            Event::Apply(o) => Event::Apply(slim(o)),
            Event::InitApply(o) => Event::InitApply(slim(o)),
            other => other,
        };
        self.writer.apply_watcher_event(&event);
        self.listed.observe(&event);
        let (Event::Apply(o) | Event::InitApply(o)) = &event else {
            return None;
        };
        let m = &o.metadata;
        Some((
            m.namespace.clone()?,
            ObjectId {
                api_version: K::api_version(&()).into_owned(),
                kind: K::kind(&()).into_owned(),
                name: m.name.clone()?,
                uid: m.uid.clone()?,
            },
        ))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn rs(name: &str, uid: &str, controller: Option<&str>) -> ReplicaSetMeta {
        replica_set("web", name, uid, controller)
    }

    /// A ReplicaSet of `ns` (with labels and a non-controller reference
    /// the store drops) controlled by Deployment `controller` (uid-NAME).
    pub(crate) fn replica_set(
        ns: &str,
        name: &str,
        uid: &str,
        controller: Option<&str>,
    ) -> ReplicaSetMeta {
        let mut m = ReplicaSetMeta::default();
        m.metadata.name = Some(name.into());
        m.metadata.namespace = Some(ns.into());
        m.metadata.uid = Some(uid.into());
        m.metadata.labels = Some([("big".to_string(), "x".repeat(100))].into());
        m.metadata.owner_references = controller.map(|d| {
            vec![
                OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: "not-the-controller".into(),
                    uid: "cm".into(),
                    ..Default::default()
                },
                OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: d.into(),
                    uid: format!("uid-{d}"),
                    controller: Some(true),
                    ..Default::default()
                },
            ]
        });
        m
    }

    fn rs_id(name: &str, uid: &str) -> ObjectId {
        ObjectId {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn a_replicasets_controller_is_answered_from_the_slimmed_store() {
        let (parents, mut feeds) = parents();
        assert!(!parents.listed());
        feeds.list(
            vec![rs("web-1", "u1", Some("web")), rs("lone", "u2", None)],
            Vec::new(),
        );
        assert!(parents.listed());
        match parents.parent_of("web", &rs_id("web-1", "u1")) {
            Parent::Controller(top) => {
                assert_eq!(
                    (top.kind.as_str(), top.name.as_str()),
                    ("Deployment", "web")
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parents.parent_of("web", &rs_id("lone", "u2")), Parent::None);
        // Another namespace, another uid (re-created), or never seen: unknown.
        assert_eq!(
            parents.parent_of("other", &rs_id("web-1", "u1")),
            Parent::Unknown
        );
        assert_eq!(
            parents.parent_of("web", &rs_id("web-1", "old")),
            Parent::Unknown
        );
        let stored = parents
            .replica_sets
            .get(&ObjectRef::new("web-1").within("web"))
            .unwrap();
        assert!(stored.metadata.labels.is_none(), "slimmed");
        assert_eq!(stored.metadata.owner_references.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn a_new_replicaset_names_itself_for_its_waiting_pods() {
        let (_parents, mut feeds) = parents();
        let got = feeds
            .replica_sets
            .feed(Event::Apply(rs("web-2", "u3", Some("web"))));
        assert_eq!(got, Some(("web".to_string(), rs_id("web-2", "u3"))));
        assert_eq!(
            feeds
                .replica_sets
                .feed(Event::Delete(rs("web-2", "u3", None))),
            None
        );
    }
}
