//! Writing the policy reports: which API the cluster serves
//! (`openreports.io/v1alpha1`, else `wgpolicyk8s.io/v1alpha2`, else none),
//! which workloads to rebuild (a queue the reconciles and watches fill), and
//! the writes: server-side apply only when a report's content hash changed,
//! delete when its workload gives no result any more. Reports of the API not
//! chosen (left behind by a switch) are deleted.
//!
//! Passes are coalesced: at most one every [`PASS_INTERVAL`], each
//! rebuilding the workloads marked since the last one; a full pass (every
//! workload, the stored reports listed again, strays deleted) runs at start,
//! after an API switch and every [`FULL_INTERVAL`]. Discovery runs every
//! [`DISCOVERY_INTERVAL`]: a CRD installed after start is used within it.
//! A pass judges and applies [`CHUNK_PODS`] pods' workloads at a time; after
//! a start, nothing is written until every node's first round is over
//! ([`FIRST_ROUNDS_WAIT`] at most).

use crate::controller::cache::stores::Caches;
use crate::controller::metrics::{Metrics, ReportWriteLabel, Stage, StageLabel, WriteOp};
use crate::controller::reports::errors::{ReportFailure, classify};
use crate::controller::reports::judge::{Scope, Workload, gather, judge_entries, resolve};
use crate::controller::reports::owners::Parents;
use crate::judgement::Bounded;
use crate::reports::{
    DesiredReport, LABEL_MANAGED_BY, MANAGED_BY, NamespaceBudget, NamespaceCaps, PolicyReport,
    Report, ReportApi, needs_write,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// At most one pass this often: a DaemonSet's rolling update changes one
/// pod per node, and its report is written once per interval, not per pod.
pub const PASS_INTERVAL: Duration = Duration::from_secs(5);
/// How soon a report API installed (or removed) after start is noticed.
pub const DISCOVERY_INTERVAL: Duration = Duration::from_secs(30);
/// Every workload rebuilt and stray reports deleted at least this often.
pub const FULL_INTERVAL: Duration = crate::controller::timing::RESYNC;
/// A pass's image look-ups (as a reconcile's).
const IMAGE_DEADLINE: Duration = crate::controller::timing::IMAGE_DEADLINE;
/// How long the writer waits at start for every node's first round
/// before it writes the reports of the nodes that had theirs.
pub const FIRST_ROUNDS_WAIT: Duration = Duration::from_secs(300);
/// Field manager of the reports' server-side apply.
pub const FIELD_MANAGER: &str = "nfguard-controller-reports";
/// Reports listed per page.
const PAGE: u32 = 500;
/// Running pods judged at once in a pass: their reports are built,
/// applied and dropped before the next chunk is judged.
const CHUNK_PODS: usize = 500;

/// Workloads whose report may have changed, filled by reconciles and
/// watches, emptied by each pass.
#[derive(Default)]
pub struct ReportQueue {
    dirty: Mutex<HashSet<Workload>>,
    notify: Notify,
}

impl ReportQueue {
    /// Mark raw workload keys (a pod's controller or the pod itself;
    /// resolved through ReplicaSets and Jobs when the pass runs).
    pub fn mark(&self, keys: impl IntoIterator<Item = Workload>) {
        let mut dirty = self.dirty.lock().unwrap_or_else(|e| e.into_inner());
        let before = dirty.len();
        dirty.extend(keys);
        if dirty.len() != before {
            self.notify.notify_one();
        }
    }

    /// Every mark since the last call (a pass's work).
    pub fn take(&self) -> HashSet<Workload> {
        std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A stored report: its namespace and name.
pub type ReportKey = (String, String);

/// A report as applied, in the chosen API's shape, its content hash in its
/// metadata. Serialized straight into the apply's body.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub enum ReportObject {
    Open(Report),
    Wg(PolicyReport),
}

impl ReportObject {
    pub fn of(d: &DesiredReport, api: ReportApi) -> Self {
        match api {
            ReportApi::OpenReports => ReportObject::Open(d.to_report()),
            ReportApi::WgPolicy => ReportObject::Wg(d.to_policy_report()),
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            ReportObject::Open(r) => &r.metadata,
            ReportObject::Wg(r) => &r.metadata,
        }
    }
}

/// What a pass writes (pure: [`plan_writes`]).
#[derive(Debug, Default)]
pub struct Writes {
    /// Reports to apply.
    pub apply: Vec<(ReportKey, ReportObject)>,
    /// Stored reports whose workload gives no result any more.
    pub delete: Vec<ReportKey>,
}

/// The reports of `desired` that differ from the stored ones (or are not
/// stored), to apply; every desired report's key that fits its namespace's
/// caps (`budget`) is added to `wanted` and its size to `sizes`. One past
/// the caps is neither applied nor wanted (a stored one is deleted).
/// Called once per chunk of a pass, so that only a chunk's reports exist
/// at once.
pub fn plan_applies(
    desired: Vec<DesiredReport>,
    stored: &BTreeMap<ReportKey, StoredHash>,
    api: ReportApi,
    wanted: &mut BTreeSet<ReportKey>,
    budget: &mut NamespaceBudget,
    sizes: &mut BTreeMap<ReportKey, u64>,
) -> Vec<(ReportKey, ReportObject)> {
    let mut apply = Vec::new();
    for d in desired {
        let key = (d.namespace.clone(), d.name.clone());
        let object = ReportObject::of(&d, api);
        let bytes = serde_json::to_vec(&object).map_or(u64::MAX, |b| b.len() as u64);
        if !budget.admit(&key.0, bytes) {
            tracing::debug!(namespace = %key.0, name = %key.1, bytes, "policy report over its namespace's caps: not written");
            sizes.remove(&key);
            continue;
        }
        sizes.insert(key.clone(), bytes);
        if needs_write(
            stored.get(&key).and_then(|h| h.as_deref()),
            object.metadata(),
        ) {
            tracing::debug!(
                namespace = %key.0,
                name = %key.1,
                why = if stored.contains_key(&key) { "content changed" } else { "not stored" },
                pass = d.summary.pass,
                fail = d.summary.fail,
                warn = d.summary.warn,
                error = d.summary.error,
                skip = d.summary.skip,
                "policy report to write"
            );
            apply.push((key.clone(), object));
        }
        wanted.insert(key);
    }
    apply
}

/// The keys of the `deferred` workloads' reports (kept: judged later).
pub fn deferred_keys(deferred: &BTreeSet<Workload>) -> BTreeSet<ReportKey> {
    deferred
        .iter()
        .map(|(ns, owner)| (ns.clone(), crate::reports::report_name(owner)))
        .collect()
}

/// The report keys a pass over `scope` rebuilds (None: every one).
fn rebuilt_keys(scope: &Scope) -> Option<BTreeSet<ReportKey>> {
    match scope {
        Scope::All => None,
        Scope::Only(set) => Some(
            set.iter()
                .map(|(ns, owner)| (ns.clone(), crate::reports::report_name(owner)))
                .collect(),
        ),
    }
}

/// A pass's budget: the stored reports it keeps without rebuilding them
/// (the other workloads' in a partial pass, the `deferred` ones) count
/// first, with the sizes last built (0 when not known yet).
pub fn pass_budget(
    caps: NamespaceCaps,
    stored: &BTreeMap<ReportKey, StoredHash>,
    sizes: &BTreeMap<ReportKey, u64>,
    deferred: &BTreeSet<ReportKey>,
    scope: &Scope,
) -> NamespaceBudget {
    let rebuilt = rebuilt_keys(scope);
    let mut budget = NamespaceBudget::new(caps);
    for key in stored.keys() {
        if deferred.contains(key) || rebuilt.as_ref().is_some_and(|r| !r.contains(key)) {
            budget.keep(&key.0, sizes.get(key).copied().unwrap_or(0));
        }
    }
    budget
}

/// The stored reports to delete once a pass judged every workload in
/// `scope`: those of a rebuilt workload (every one on a full pass) that no
/// desired or deferred report (`wanted`) names.
pub fn plan_deletes(
    stored: &BTreeMap<ReportKey, StoredHash>,
    wanted: &BTreeSet<ReportKey>,
    scope: &Scope,
) -> Vec<ReportKey> {
    let rebuilt = rebuilt_keys(scope);
    stored
        .keys()
        .filter(|key| rebuilt.as_ref().is_none_or(|r| r.contains(*key)) && !wanted.contains(*key))
        .cloned()
        .collect()
}

/// The writes that bring `stored` to `desired` for the workloads in
/// `scope`, in one go ([`plan_applies`] then [`plan_deletes`]): a desired
/// report whose hash differs from the stored one's (or that is not stored)
/// is applied; a stored one no desired report has is deleted when its
/// workload was rebuilt (`scope`), or on a full pass, but not when its
/// workload was `deferred` (judged later). Reports past their namespace's
/// `caps` are not written.
pub fn plan_writes(
    desired: Vec<DesiredReport>,
    deferred: &BTreeSet<Workload>,
    scope: &Scope,
    stored: &BTreeMap<ReportKey, StoredHash>,
    api: ReportApi,
    caps: NamespaceCaps,
) -> Writes {
    let mut wanted = deferred_keys(deferred);
    let mut sizes = BTreeMap::new();
    let mut budget = pass_budget(caps, stored, &sizes, &wanted, scope);
    let apply = plan_applies(desired, stored, api, &mut wanted, &mut budget, &mut sizes);
    Writes {
        apply,
        delete: plan_deletes(stored, &wanted, scope),
    }
}

/// The report APIs the cluster serves, in order of preference. None: the
/// discovery itself failed (keep what was chosen before).
pub async fn discover(client: &kube::Client) -> Option<Vec<ReportApi>> {
    crate::reports::served_apis(client)
        .await
        .inspect_err(|error| tracing::warn!(%error, "report API discovery failed"))
        .ok()
}

fn managed_by() -> ListParams {
    ListParams::default()
        .labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"))
        .limit(PAGE)
}

/// The reports nfguard wrote in `api` (metadata only, every page), each
/// slimmed to its content hash.
async fn list_stored(
    client: &kube::Client,
    api: ReportApi,
) -> Result<BTreeMap<ReportKey, StoredHash>, kube::Error> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &api.api_resource());
    let mut out = BTreeMap::new();
    let mut params = managed_by();
    loop {
        let page = all.list_metadata(&params).await?;
        for o in page.items {
            let hash = slim(&o.metadata);
            let (Some(ns), Some(name)) = (o.metadata.namespace, o.metadata.name) else {
                continue;
            };
            out.insert((ns, name), hash);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = managed_by().continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// What the writer keeps of a stored report: its content hash (what
/// `needs_write` reads; None: it carries none, so it is rewritten). A whole
/// `ObjectMeta` took about 540 bytes a report (heaptrack), 5 MiB for the
/// 10,000 reports of 5,000 x 20.
pub type StoredHash = Option<Box<str>>;

fn slim(meta: &ObjectMeta) -> StoredHash {
    crate::reports::hash_annotation(meta).map(Box::from)
}

/// Everything the writer needs.
pub struct ReportWriter {
    pub client: kube::Client,
    pub caches: Caches,
    pub parents: Parents,
    pub images: Arc<Bounded>,
    pub queue: Arc<ReportQueue>,
    pub metrics: Arc<Metrics>,
    /// At most so many reports and bytes in a namespace.
    pub caps: NamespaceCaps,
}

/// The writer's state between passes.
struct State {
    api: Option<ReportApi>,
    /// Whether a discovery has answered yet (the first answer is logged
    /// even when it is "none").
    discovered: bool,
    stored: BTreeMap<ReportKey, StoredHash>,
    /// Bytes of each report as last built (the namespaces' caps).
    sizes: BTreeMap<ReportKey, u64>,
    next_discovery: Instant,
    next_full: Instant,
    /// Since when the writer waits for every node's first round (None:
    /// no longer).
    rounds_from: Option<Instant>,
}

impl ReportWriter {
    fn error(&self) {
        self.metrics
            .reconcile_errors
            .get_or_create(&StageLabel {
                stage: Stage::reports,
            })
            .inc();
    }

    /// Handle a failed list or apply ([`classify`]): the API gone makes
    /// the next step discover again and then rebuild everything (this
    /// pass's marks are not lost); a namespace being deleted is the
    /// workload's end; anything else is logged and counted.
    fn failed(
        &self,
        state: &mut State,
        api: ReportApi,
        error: &kube::Error,
        what: &str,
    ) -> ReportFailure {
        let failure = classify(error);
        match failure {
            ReportFailure::ApiGone => {
                tracing::info!(%error, api = api.api_version(), "{what}: the report API is not served any more (its CRD removed?); discovering again");
                let now = Instant::now();
                state.next_discovery = now;
                state.next_full = now;
            }
            ReportFailure::NamespaceGone => {
                tracing::debug!(%error, "{what}: its namespace is being deleted")
            }
            ReportFailure::Error => {
                tracing::warn!(%error, api = api.api_version(), "{what}");
                self.error();
            }
        }
        failure
    }

    fn count(&self, op: WriteOp, api: ReportApi) {
        self.metrics
            .report_writes
            .get_or_create(&ReportWriteLabel {
                op,
                api: api.api_version(),
            })
            .inc();
    }

    /// Say which namespaces were at their caps in a pass (a warning per
    /// namespace each pass while it is).
    fn over_caps(&self, budget: &NamespaceBudget) {
        let caps = budget.caps();
        for (namespace, refused) in budget.refused() {
            tracing::warn!(
                %namespace,
                refused,
                max_reports = caps.reports,
                max_bytes = caps.bytes,
                "policy reports over the namespace's caps were not written (--max-reports-per-namespace, --max-report-bytes-per-namespace)"
            );
        }
        let total: usize = budget.refused().values().sum();
        self.metrics.reports_over_cap.set(total as i64);
    }

    /// Run passes until `stop` completes.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        let now = Instant::now();
        let mut state = State {
            api: None,
            discovered: false,
            stored: BTreeMap::new(),
            sizes: BTreeMap::new(),
            next_discovery: now,
            next_full: now,
            rounds_from: Some(now),
        };
        self.metrics.set_reports_api(None);
        loop {
            let wake = state.next_discovery.min(state.next_full);
            tokio::select! {
                _ = &mut stop => return,
                _ = self.queue.notify.notified() => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
            self.step(&mut state).await;
            // Coalesce: what is marked meanwhile waits for the next pass.
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(PASS_INTERVAL) => {}
            }
        }
    }

    async fn step(&self, state: &mut State) {
        let now = Instant::now();
        if now >= state.next_discovery {
            state.next_discovery = now + DISCOVERY_INTERVAL;
            if let Some(served) = discover(&self.client).await {
                self.switch(state, served).await;
            }
        }
        let Some(api) = state.api else {
            // Nothing to write to; the marks are rebuilt on the switch.
            self.queue.take();
            return;
        };
        if self
            .caches
            .wait_listed(crate::controller::timing::LIST_WAIT)
            .await
            .is_err()
            || !self.parents.listed()
        {
            // Not ready: try again after the next interval.
            self.queue.notify.notify_one();
            return;
        }
        if !self.first_rounds_over(state) {
            self.queue.notify.notify_one();
            return;
        }
        let now = Instant::now();
        let scope = if now >= state.next_full {
            match list_stored(&self.client, api).await {
                Ok(stored) => {
                    state.sizes.retain(|key, _| stored.contains_key(key));
                    state.stored = stored;
                }
                Err(error) => {
                    self.failed(state, api, &error, "listing the policy reports failed");
                    return;
                }
            }
            state.next_full = now + FULL_INTERVAL;
            self.queue.take();
            Scope::All
        } else {
            let raw = self.queue.take();
            if raw.is_empty() {
                return;
            }
            Scope::Only(
                raw.iter()
                    .filter_map(|w| resolve(&self.parents, w))
                    .collect(),
            )
        };
        self.pass(state, api, &scope).await;
        if matches!(scope, Scope::All) {
            // A full pass listed every stored report and judged every
            // workload: give the arenas' freed pages back.
            crate::runtime::allocator::release_free_pages();
        }
    }

    /// Whether every node has had its first round since start, or the
    /// writer waited [`FIRST_ROUNDS_WAIT`] for it. Until then no report is
    /// written: a cold start's labels, conditions and taints (what gates
    /// scheduling) do not queue behind a report per workload at the API
    /// server, and no report is judged before its node's writer inventory
    /// is known.
    fn first_rounds_over(&self, state: &mut State) -> bool {
        let Some(from) = state.rounds_from else {
            return true;
        };
        let nodes = self.caches.nodes.state();
        let pending = self
            .caches
            .first_rounds
            .pending(nodes.iter().filter_map(|n| n.metadata.name.as_deref()));
        let waited = from.elapsed();
        if pending > 0 && waited < FIRST_ROUNDS_WAIT {
            return false;
        }
        if pending == 0 {
            tracing::info!(
                nodes = nodes.len(),
                waited_ms = waited.as_millis() as u64,
                "every node's first round is over: writing policy reports"
            );
        } else {
            tracing::warn!(
                nodes = nodes.len(),
                pending,
                waited_s = waited.as_secs(),
                "writing policy reports before every node's first round is over (their workloads wait)"
            );
        }
        state.rounds_from = None;
        true
    }

    /// A new answer from discovery: choose, log and count a change once,
    /// and delete the reports nfguard left in the other API.
    async fn switch(&self, state: &mut State, served: Vec<ReportApi>) {
        let chosen = served.first().copied();
        if chosen != state.api || !state.discovered {
            match chosen {
                Some(api) => tracing::info!(
                    api = api.api_version(),
                    kind = api.kind(),
                    "writing policy reports"
                ),
                // A warning (the default log level shows it, once per
                // change): the feature is off until a report CRD is installed.
                None => tracing::warn!(
                    "no policy report API served (neither openreports.io/v1alpha1 reports nor wgpolicyk8s.io/v1alpha2 policyreports): not writing policy reports until one is"
                ),
            }
            self.metrics.set_reports_api(chosen);
            state.api = chosen;
            state.discovered = true;
            state.stored.clear();
            state.sizes.clear();
            // Rebuild everything in the new API now.
            state.next_full = Instant::now();
            for old in served.iter().skip(1) {
                self.delete_all(*old).await;
            }
        }
    }

    /// Delete every report nfguard wrote in `api`.
    async fn delete_all(&self, api: ReportApi) {
        let stored = match list_stored(&self.client, api).await {
            Ok(s) => s,
            // Not served any more: nothing of it is left to delete.
            Err(error) if classify(&error) == ReportFailure::ApiGone => return,
            Err(error) => {
                tracing::warn!(%error, api = api.api_version(), "listing old policy reports failed");
                self.error();
                return;
            }
        };
        for key in stored.keys() {
            if self.delete(api, key).await {
                tracing::info!(namespace = %key.0, name = %key.1, api = api.api_version(), "deleted a policy report of the API no longer used");
            }
        }
    }

    async fn delete(&self, api: ReportApi, (ns, name): &ReportKey) -> bool {
        let reports: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &api.api_resource());
        match reports.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                self.count(WriteOp::delete, api);
                true
            }
            Err(kube::Error::Api(s)) if s.code == 404 => true,
            Err(error) => {
                tracing::warn!(%error, namespace = %ns, name = %name, "deleting a policy report failed");
                self.error();
                false
            }
        }
    }

    /// Judge the workloads in `scope` a chunk at a time, applying each
    /// chunk's changed reports before the next is judged (a full pass of
    /// 10,000 workloads never holds 10,000 reports), then delete the
    /// stored reports no workload gives any more.
    async fn pass(&self, state: &mut State, api: ReportApi, scope: &Scope) {
        let gathered = gather(&self.caches, &self.parents, scope);
        let mut wanted = deferred_keys(&gathered.deferred);
        let mut budget = pass_budget(self.caps, &state.stored, &state.sizes, &wanted, scope);
        let (mut reports, mut applied) = (0, 0);
        // Strict: the API server refuses a field the installed report CRD's
        // schema lacks instead of dropping it, so the e2e's writes through the
        // upstream CRDs prove nfguard's reports keep to their schemas.
        let params = PatchParams::apply(FIELD_MANAGER)
            .force()
            .validation_strict();
        for chunk in gathered.chunks(CHUNK_PODS) {
            let deadline = Instant::now() + IMAGE_DEADLINE;
            let desired = judge_entries(&self.caches, &self.images, chunk, deadline).await;
            reports += desired.len();
            let apply = plan_applies(
                desired,
                &state.stored,
                api,
                &mut wanted,
                &mut budget,
                &mut state.sizes,
            );
            for ((ns, name), object) in apply {
                let stored_meta = slim(object.metadata());
                let reports: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), &ns, &api.api_resource());
                match reports.patch(&name, &params, &Patch::Apply(&object)).await {
                    Ok(_) => {
                        self.count(WriteOp::apply, api);
                        applied += 1;
                        state.stored.insert((ns, name), stored_meta);
                    }
                    Err(error) => {
                        let what = format!("writing the policy report {ns}/{name} failed");
                        if self.failed(state, api, &error, &what) == ReportFailure::ApiGone {
                            // The rest would fail the same way; the next
                            // discovery decides what to write, and where.
                            return;
                        }
                    }
                }
            }
        }
        let delete = plan_deletes(&state.stored, &wanted, scope);
        tracing::debug!(
            pods = gathered.pods(),
            reports,
            applied,
            delete = delete.len(),
            waiting = gathered.waiting,
            deferred = gathered.deferred.len(),
            "policy report pass"
        );
        for key in delete {
            if self.delete(api, &key).await {
                state.sizes.remove(&key);
                state.stored.remove(&key);
            }
        }
        self.over_caps(&budget);
        self.metrics.reports.set(state.stored.len() as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reports::build::without_hash;
    use crate::reports::{ObjectId, ReportSummary};

    fn owner(name: &str) -> ObjectId {
        ObjectId {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn desired(name: &str, fail: u64) -> DesiredReport {
        DesiredReport {
            namespace: "ns".into(),
            name: crate::reports::report_name(&owner(name)),
            owner: owner(name),
            results: Vec::new(),
            summary: ReportSummary {
                fail,
                ..Default::default()
            },
            left_out: 0,
        }
    }

    fn stored_from(d: &[DesiredReport], api: ReportApi) -> BTreeMap<ReportKey, StoredHash> {
        d.iter()
            .map(|d| {
                let object = ReportObject::of(d, api);
                (
                    (d.namespace.clone(), d.name.clone()),
                    slim(object.metadata()),
                )
            })
            .collect()
    }

    fn keys(w: &Writes) -> (Vec<&str>, Vec<&str>) {
        (
            w.apply.iter().map(|(k, _)| without_hash(&k.1)).collect(),
            w.delete.iter().map(|k| without_hash(&k.1)).collect(),
        )
    }

    #[test]
    fn the_no_change_pass_writes_nothing() {
        let api = ReportApi::OpenReports;
        let now = [desired("a", 1), desired("b", 0)];
        let stored = stored_from(&now, api);
        let w = plan_writes(
            now.to_vec(),
            &BTreeSet::new(),
            &Scope::All,
            &stored,
            api,
            CAPS,
        );
        assert_eq!(keys(&w), (vec![], vec![]));
    }

    #[test]
    fn a_changed_or_new_report_is_applied_and_one_without_results_deleted() {
        let api = ReportApi::OpenReports;
        let stored = stored_from(&[desired("a", 1), desired("gone", 1)], api);
        let now = [desired("a", 2), desired("new", 1)];
        let w = plan_writes(
            now.to_vec(),
            &BTreeSet::new(),
            &Scope::All,
            &stored,
            api,
            CAPS,
        );
        assert_eq!(
            keys(&w),
            (
                vec!["nfguard-daemonset-a", "nfguard-daemonset-new"],
                vec!["nfguard-daemonset-gone"]
            )
        );
        let (_, object) = &w.apply[0];
        let value = serde_json::to_value(object).unwrap();
        assert_eq!(value["kind"], "Report");
        assert_eq!(
            value["metadata"]["annotations"][crate::reports::ANNOTATION_CONTENT_HASH],
            object.metadata().annotations.as_ref().unwrap()
                [crate::reports::ANNOTATION_CONTENT_HASH]
        );
    }

    #[test]
    fn a_partial_pass_deletes_only_reports_of_the_workloads_it_rebuilt() {
        let api = ReportApi::WgPolicy;
        let stored = stored_from(&[desired("a", 1), desired("b", 1)], api);
        // Only `a` was rebuilt and it gives no result now; `b` was not looked at.
        let scope = Scope::Only([("ns".to_string(), owner("a"))].into());
        let w = plan_writes(Vec::new(), &BTreeSet::new(), &scope, &stored, api, CAPS);
        assert_eq!(keys(&w), (vec![], vec!["nfguard-daemonset-a"]));
    }

    #[test]
    fn a_deferred_workload_keeps_its_stored_report() {
        let api = ReportApi::OpenReports;
        let stored = stored_from(&[desired("a", 1), desired("b", 1)], api);
        // `a` waits for a node's first round; `b` gives no result any more.
        let deferred = [("ns".to_string(), owner("a"))].into();
        let w = plan_writes(Vec::new(), &deferred, &Scope::All, &stored, api, CAPS);
        assert_eq!(keys(&w), (vec![], vec!["nfguard-daemonset-b"]));
    }

    #[test]
    fn a_report_stored_in_the_other_shape_is_rewritten() {
        let now = [desired("a", 1)];
        let stored = stored_from(&now, ReportApi::WgPolicy);
        let w = plan_writes(
            now.to_vec(),
            &BTreeSet::new(),
            &Scope::All,
            &stored,
            ReportApi::OpenReports,
            CAPS,
        );
        assert_eq!(keys(&w), (vec!["nfguard-daemonset-a"], vec![]));
    }

    const CAPS: NamespaceCaps = NamespaceCaps {
        reports: 500,
        bytes: 32 << 20,
    };

    #[test]
    fn reports_past_a_namespaces_caps_are_not_written_and_a_stored_one_goes() {
        let api = ReportApi::OpenReports;
        let flood: Vec<DesiredReport> = ["a", "b", "c", "d"].map(|n| desired(n, 1)).to_vec();
        // `d` was stored by a pass with room for it.
        let stored = stored_from(&flood[3..], api);
        let caps = NamespaceCaps {
            reports: 2,
            bytes: 1 << 20,
        };
        let w = plan_writes(
            flood.clone(),
            &BTreeSet::new(),
            &Scope::All,
            &stored,
            api,
            caps,
        );
        assert_eq!(
            keys(&w),
            (
                vec!["nfguard-daemonset-a", "nfguard-daemonset-b"],
                vec!["nfguard-daemonset-d"]
            )
        );
        // The bytes cap: one report's JSON is a few hundred bytes.
        let one = serde_json::to_vec(&ReportObject::of(&flood[0], api))
            .unwrap()
            .len() as u64;
        let caps = NamespaceCaps {
            reports: 500,
            bytes: 3 * one - 1,
        };
        let w = plan_writes(
            flood,
            &BTreeSet::new(),
            &Scope::All,
            &BTreeMap::new(),
            api,
            caps,
        );
        assert_eq!(keys(&w).0, ["nfguard-daemonset-a", "nfguard-daemonset-b"]);
    }

    #[test]
    fn a_partial_pass_counts_the_namespaces_other_reports_against_its_caps() {
        let api = ReportApi::OpenReports;
        let stored = stored_from(&[desired("a", 1), desired("b", 1)], api);
        let caps = NamespaceCaps {
            reports: 2,
            bytes: 1 << 20,
        };
        // `c` is new; `a` and `b` were not rebuilt and fill the namespace.
        let scope = Scope::Only([("ns".to_string(), owner("c"))].into());
        let w = plan_writes(
            vec![desired("c", 1)],
            &BTreeSet::new(),
            &scope,
            &stored,
            api,
            caps,
        );
        assert_eq!(keys(&w), (vec![], vec![]));
        // Rebuilding `a` keeps it within the caps.
        let scope = Scope::Only([("ns".to_string(), owner("a"))].into());
        let w = plan_writes(
            vec![desired("a", 2)],
            &BTreeSet::new(),
            &scope,
            &stored,
            api,
            caps,
        );
        assert_eq!(keys(&w), (vec!["nfguard-daemonset-a"], vec![]));
    }

    #[test]
    fn the_queue_hands_each_mark_to_one_pass() {
        let q = ReportQueue::default();
        let w = ("ns".to_string(), owner("a"));
        q.mark([w.clone(), w.clone()]);
        assert_eq!(q.take(), [w].into());
        assert!(q.take().is_empty());
    }
}
