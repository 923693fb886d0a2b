#!/usr/bin/env python3
"""Checks nfguard's rendered install manifests beyond what kubernetes-validate
sees: custom resources against the CRD schemas, and the security and wiring
invariants of docs/install.md (least privilege, non-root, the reporter's
single capability, the webhook's failure policy, ...).

Usage: check_manifests.py RENDERED.yaml [docs/install.md]
NFGUARD_NAMESPACE: the namespace nfguard was rendered for (default
nfguard-system; the Helm chart's check renders another release namespace).
(with the doc, its RBAC table must equal the rendered RBAC)
Prints one line per violation and exits 1 if there is any, else 0.
"""
import copy
import os
import sys

import jsonschema
import yaml

NS = os.environ.get("NFGUARD_NAMESPACE", "nfguard-system")
IMAGE_REPO = "ghcr.io/nfguard/nfguard"
CLUSTER_SCOPED = {
    "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
    "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "NetfilterPolicy", "NodeNetfilterProfile",
}
errors = []


def fail(msg):
    errors.append(msg)


def find(objs, kind, name):
    hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(hits) != 1:
        fail(f"expected exactly one {kind}/{name}, found {len(hits)}")
        return {}
    return hits[0]


# ---- custom resources against their CRD's schema ---------------------------

def to_jsonschema(s):
    """OpenAPI v3 (Kubernetes flavour) -> JSON Schema; unknown fields become
    errors (the API server would silently prune them, hiding typos)."""
    if not isinstance(s, dict):
        return s
    out = {k: v for k, v in s.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if "properties" in out:
        out["properties"] = {k: to_jsonschema(v) for k, v in out["properties"].items()}
        if not s.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = to_jsonschema(out["additionalProperties"])
    if "items" in out:
        out["items"] = to_jsonschema(out["items"])
    if s.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def cr_validators(objs):
    validators = {}
    for crd in (o for o in objs if o["kind"] == "CustomResourceDefinition"):
        spec = crd["spec"]
        for v in spec["versions"]:
            schema = to_jsonschema(copy.deepcopy(v["schema"]["openAPIV3Schema"]))
            schema["properties"]["apiVersion"] = {"type": "string"}
            schema["properties"]["kind"] = {"type": "string"}
            schema["properties"]["metadata"] = {"type": "object"}
            jsonschema.Draft7Validator.check_schema(schema)
            validators[(f"{spec['group']}/{v['name']}", spec["names"]["kind"])] = (
                jsonschema.Draft7Validator(schema)
            )
    return validators


def schema_errors(validators, obj):
    key = (obj["apiVersion"], obj["kind"])
    if key not in validators:
        return [f"no CRD defines {key}"]
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validators[key].iter_errors(obj)
    ]


def check_custom_resources(objs):
    validators = cr_validators(objs)
    crs = [o for o in objs if o["apiVersion"].startswith("nfguard.io/")]
    for cr in crs:
        for e in schema_errors(validators, cr):
            fail(f"{cr['kind']}/{cr['metadata']['name']} violates its CRD schema: {e}")
    # The schema check must be able to fail: a broken policy is rejected.
    if crs:
        bad = copy.deepcopy(crs[0])
        bad["spec"]["action"] = "Allow"
        bad["spec"]["unknownField"] = 1
        bad["spec"]["maxTaintedNodesPercent"] = 150
        if len(schema_errors(validators, bad)) < 3:
            fail("self-test: the CRD schema check accepted an invalid NetfilterPolicy")
    policy = find(objs, "NetfilterPolicy", "default")
    if policy and (policy["spec"].get("action"), policy["spec"].get("unresolvedImages")) != ("Deny", "Warn"):
        fail("the default NetfilterPolicy must be action Deny, unresolvedImages Warn")


# ---- placement, images, pods ---------------------------------------------

def check_namespaces(objs):
    for o in objs:
        ns = o["metadata"].get("namespace")
        ident = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] in CLUSTER_SCOPED and ns is not None:
            fail(f"{ident} is cluster-scoped but has namespace {ns}")
        if o["kind"] not in CLUSTER_SCOPED and ns != NS:
            fail(f"{ident} must be in {NS}, is in {ns}")


def pod_spec(workload):
    return workload.get("spec", {}).get("template", {}).get("spec", {})


def check_pod_common(objs, w, name):
    spec = pod_spec(w)
    sa = spec.get("serviceAccountName")
    if not any(o["kind"] == "ServiceAccount" and o["metadata"]["name"] == sa for o in objs):
        fail(f"{name}: serviceAccountName {sa!r} has no ServiceAccount")
    for c in spec.get("containers", []):
        if not c.get("image", "").startswith(IMAGE_REPO + ":") and not c.get("image", "").startswith(IMAGE_REPO + "@"):
            fail(f"{name}/{c['name']}: image {c.get('image')} is not {IMAGE_REPO}")
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        if "--metrics-listen" not in c.get("args", []):
            fail(f"{name}/{c['name']}: no --metrics-listen")
        for probe in ("livenessProbe", "readinessProbe"):
            get = c.get(probe, {}).get("httpGet")
            if not get:
                fail(f"{name}/{c['name']}: no {probe}")
            elif get["port"] not in ports and get["port"] not in ports.values():
                fail(f"{name}/{c['name']}: {probe} port {get['port']} is not a container port")
        if "memory" not in c.get("resources", {}).get("limits", {}):
            fail(f"{name}/{c['name']}: no memory limit")
    return spec


def check_reporter(objs):
    ds = find(objs, "DaemonSet", "nfguard-reporter")
    if not ds:
        return
    spec = check_pod_common(objs, ds, "reporter")
    if spec.get("hostNetwork") is not True:
        fail("reporter: hostNetwork must be true (it probes the node's netns)")
    if spec.get("priorityClassName") != "system-node-critical":
        fail("reporter: priorityClassName must be system-node-critical")
    tolerated = {t.get("key") for t in spec.get("tolerations", [])}
    for key in ("nfguard.io/netfilter-degraded", "nfguard.io/iptables-incompatible",
                "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if key not in tolerated:
            fail(f"reporter: must tolerate {key} (degraded and failing nodes keep a profile)")
    if None in tolerated or "node-role.kubernetes.io/control-plane" in tolerated:
        fail("reporter: control-plane nodes only by opt-in (no toleration of every taint)")
    (c,) = spec["containers"]
    sc = c.get("securityContext", {})
    if sc.get("privileged") is not False or sc.get("allowPrivilegeEscalation") is not False:
        fail("reporter: must not be privileged nor escalate")
    if sc.get("capabilities") != {"drop": ["ALL"], "add": ["NET_ADMIN"]}:
        fail(f"reporter: capabilities must be drop ALL, add NET_ADMIN only, are {sc.get('capabilities')}")
    if sc.get("readOnlyRootFilesystem") is not True:
        fail("reporter: readOnlyRootFilesystem")
    args = c.get("args", [])
    if args[:1] != ["reporter"] or "--host-root" not in args or args[args.index("--host-root") + 1] != "/host":
        fail(f"reporter: args must be reporter --host-root /host, are {args}")
    env = {e["name"]: e for e in c.get("env", [])}
    if env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "spec.nodeName":
        fail("reporter: NODE_NAME must come from the downward API (spec.nodeName)")
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    host = {m["mountPath"]: m for m in c.get("volumeMounts", []) if "hostPath" in vols.get(m["name"], {})}
    if sorted(host) != ["/host/bin", "/host/etc/alternatives", "/host/sbin", "/host/usr"]:
        fail(f"reporter: host mounts must be the probed directories only, are {sorted(host)}")
    for path, m in host.items():
        hp = vols[m["name"]]["hostPath"]
        if (m.get("readOnly"), m.get("recursiveReadOnly")) != (True, "IfPossible"):
            fail(f"reporter: {path} must be readOnly with recursiveReadOnly IfPossible")
        if hp != {"path": path.removeprefix("/host"), "type": "Directory"}:
            fail(f"reporter: {path} must be hostPath {path.removeprefix('/host')} of type Directory (never created), is {hp}")


def check_nonroot_deployment(objs, name, component, replicas, host_network_allowed=False):
    d = find(objs, "Deployment", name)
    if not d:
        return None
    if d["spec"].get("replicas") != replicas:
        fail(f"{component}: replicas must be {replicas}")
    spec = check_pod_common(objs, d, component)
    psc = spec.get("securityContext", {})
    if psc.get("runAsNonRoot") is not True or psc.get("runAsUser", 0) == 0:
        fail(f"{component}: must run as non-root")
    if spec.get("hostNetwork") and not host_network_allowed:
        fail(f"{component}: must not use hostNetwork")
    for c in spec.get("containers", []):
        sc = c.get("securityContext", {})
        if sc.get("readOnlyRootFilesystem") is not True:
            fail(f"{component}: readOnlyRootFilesystem")
        if sc.get("allowPrivilegeEscalation") is not False or sc.get("privileged"):
            fail(f"{component}: no privilege escalation")
        if sc.get("capabilities") != {"drop": ["ALL"]}:
            fail(f"{component}: capabilities must be drop ALL, nothing added")
        if c.get("args", [])[:1] != [component]:
            fail(f"{component}: first arg must be the subcommand {component}")
    return d


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


# The webhook's ports (manifests/webhook.yaml), and the reporter's, which it
# holds on every node (its metrics and health ports).
WEBHOOK_PORT, WEBHOOK_METRICS_PORT = 10263, 10264
REPORTER_PORTS = {9090, 9091}


def check_webhook(objs):
    """The webhook serves /validate on WEBHOOK_PORT. On the node's network
    (the default): node DNS, ports clear of the reporter's, a rollout that
    replaces rather than surges (a surge replica would need a node with free
    ports), and no NetworkPolicy (it has no hold there). On the pod network
    (manifests/webhook-pod-network): a surge rollout and a NetworkPolicy
    admitting exactly its two ports."""
    check_nonroot_deployment(objs, "nfguard-controller", "controller", 2)
    d = check_nonroot_deployment(objs, "nfguard-webhook", "webhook", 2, host_network_allowed=True)
    if not d:
        return
    labels = d["spec"]["template"]["metadata"]["labels"]
    spec = pod_spec(d)
    (c,) = spec["containers"]
    args = c["args"]
    for flag, value in (("--listen", f"0.0.0.0:{WEBHOOK_PORT}"), ("--metrics-listen", f"0.0.0.0:{WEBHOOK_METRICS_PORT}")):
        if flag not in args or args[args.index(flag) + 1] != value:
            fail(f"webhook: {flag} {value} missing")
    if "--self-signed" not in args:
        fail("webhook: --self-signed missing")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    if ports != {"https": WEBHOOK_PORT, "metrics": WEBHOOK_METRICS_PORT}:
        fail(f"webhook: ports must be https {WEBHOOK_PORT} and metrics {WEBHOOK_METRICS_PORT}, are {ports}")
    ready = c.get("readinessProbe", {}).get("httpGet", {})
    if ready.get("scheme") != "HTTPS" or ports.get(ready.get("port"), ready.get("port")) != WEBHOOK_PORT:
        fail(f"webhook: readiness must use HTTPS /readyz on {WEBHOOK_PORT}")
    spread = spec.get("topologySpreadConstraints", [])
    if not any(t["topologyKey"] == "kubernetes.io/hostname" and selects(t["labelSelector"], labels) for t in spread):
        fail("webhook: replicas must spread across nodes")
    pdb = find(objs, "PodDisruptionBudget", "nfguard-webhook")
    if pdb and not selects(pdb["spec"]["selector"], labels):
        fail("webhook: the PodDisruptionBudget does not select the webhook pods")
    svc = find(objs, "Service", "nfguard-webhook")
    if svc:
        if not selects({"matchLabels": svc["spec"]["selector"]}, labels):
            fail("webhook: the Service does not select the webhook pods")
        (p,) = svc["spec"]["ports"]
        if p["port"] != 443 or ports.get(p["targetPort"], p["targetPort"]) != WEBHOOK_PORT:
            fail(f"webhook: the Service must map 443 -> {WEBHOOK_PORT}")
    rolling = d["spec"].get("strategy", {}).get("rollingUpdate", {})
    netpols = [o for o in objs if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "nfguard-webhook"]
    netpol = netpols[0] if len(netpols) == 1 else None
    if spec.get("hostNetwork"):
        if spec.get("dnsPolicy") != "Default":
            fail(f"webhook: on the node's network dnsPolicy must be Default (cluster DNS runs on the pod network), is {spec.get('dnsPolicy')}")
        if set(ports.values()) & REPORTER_PORTS:
            fail(f"webhook: on the node's network its ports {sorted(ports.values())} must not be the reporter's {sorted(REPORTER_PORTS)}")
        if rolling != {"maxUnavailable": 1, "maxSurge": 0}:
            fail(f"webhook: on the node's network a rollout must replace (maxUnavailable 1, maxSurge 0), is {rolling}")
        if netpols:
            fail("webhook: a NetworkPolicy for pods on the node's network has no effect; it belongs to the pod-network component")
        return check_webhook_configuration(objs, svc)
    if rolling != {"maxUnavailable": 0, "maxSurge": 1}:
        fail(f"webhook: on the pod network a rollout must surge (maxUnavailable 0, maxSurge 1), is {rolling}")
    # Ingress only to the webhook port and the metrics port.
    if not netpol:
        fail("webhook: the NetworkPolicy nfguard-webhook is missing")
    else:
        np = netpol["spec"]
        if not selects(np["podSelector"], labels):
            fail("webhook: the NetworkPolicy does not select the webhook pods")
        if np.get("policyTypes") != ["Ingress"]:
            fail(f"webhook: the NetworkPolicy's policyTypes must be [Ingress], is {np.get('policyTypes')}")
        admitted = sorted(ports.get(q["port"], q["port"]) for r in np.get("ingress", []) for q in r.get("ports", []))
        if admitted != sorted(ports.values()):
            fail(f"webhook: the NetworkPolicy must admit exactly the webhook and metrics ports, admits {admitted}")
    check_webhook_configuration(objs, svc)


def check_webhook_configuration(objs, svc):
    vwc = find(objs, "ValidatingWebhookConfiguration", "nfguard")
    if not vwc:
        return
    (hook,) = vwc["webhooks"]
    expect = {"failurePolicy": "Ignore", "timeoutSeconds": 10, "sideEffects": "None",
              "admissionReviewVersions": ["v1"]}
    for k, v in expect.items():
        if hook.get(k) != v:
            fail(f"webhook configuration: {k} must be {v}, is {hook.get(k)}")
    ref = hook["clientConfig"]["service"]
    if (ref["name"], ref["namespace"], ref.get("port", 443), ref.get("path")) != (
        svc["metadata"]["name"], NS, 443, "/validate"
    ):
        fail(f"webhook configuration: service reference {ref} is not nfguard-webhook:443/validate")
    excluded = [e for e in hook.get("namespaceSelector", {}).get("matchExpressions", [])
                if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"]
    if not excluded or NS not in excluded[0]["values"]:
        fail("webhook configuration: nfguard's own namespace must be excluded")
    covered = set()
    for r in hook["rules"]:
        for g in r["apiGroups"]:
            for res in r["resources"]:
                for op in r["operations"]:
                    covered.add((g, res, op))
    wanted = {("", "pods", "CREATE"), ("", "pods", "UPDATE"), ("", "pods/ephemeralcontainers", "UPDATE")}
    for g, kinds in (("apps", ["daemonsets", "deployments", "statefulsets", "replicasets"]),
                     ("batch", ["jobs", "cronjobs"])):
        wanted |= {(g, k, op) for k in kinds for op in ("CREATE", "UPDATE")}
    if covered != wanted:
        fail(f"webhook configuration: rules missing {sorted(wanted - covered)}, extra {sorted(covered - wanted)}")


# ---- RBAC ------------------------------------------------------------------

def rules_of(objs, sa):
    """Every (namespace or None, apiGroup, resource, verb, resourceNames) the ServiceAccount gets."""
    granted = set()
    for b in objs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa and s.get("namespace") == NS
                   for s in b.get("subjects", [])):
            continue
        role_kind = b["roleRef"]["kind"]
        role = find(objs, role_kind, b["roleRef"]["name"])
        scope = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        for r in role.get("rules", []):
            for field in ("apiGroups", "resources", "verbs"):
                if "*" in r.get(field, []):
                    fail(f"{role_kind}/{role['metadata']['name']}: wildcard in {field}")
            for g in r["apiGroups"]:
                for res in r["resources"]:
                    for v in r["verbs"]:
                        granted.add((scope, g, res, v, tuple(r.get("resourceNames", []))))
    return granted


def check_rbac(objs):
    nfg = "nfguard.io"
    expected = {
        "nfguard-reporter": {(None, nfg, "nodenetfilterprofiles", "create", ()),
                             (None, nfg, "nodenetfilterprofiles/status", "patch", ()),
                             (None, "", "nodes", "get", ()),
                             (None, "authentication.k8s.io", "tokenreviews", "create", ()),
                             (None, "authorization.k8s.io", "subjectaccessreviews", "create", ()),
                             (None, "certificates.k8s.io", "certificatesigningrequests", "create", ()),
                             (None, "certificates.k8s.io", "certificatesigningrequests", "get", ())},
        "nfguard-controller": {
            (None, nfg, "nodenetfilterprofiles", v, ()) for v in ("list", "watch", "delete")
        } | {(None, nfg, "nodenetfilterprofiles/status", "patch", ())}
          | {(None, nfg, "netfilterpolicies", v, ()) for v in ("list", "watch")}
          | {(None, nfg, "netfilterpolicies/status", "patch", ())}
          | {(None, "", "nodes", v, ()) for v in ("list", "watch", "patch")}
          | {(None, "", "pods", v, ()) for v in ("list", "watch")}
          | {(None, "", "namespaces", v, ()) for v in ("list", "watch")}
          | {(None, g, r, v, ()) for g, r in (("apps", "replicasets"), ("batch", "jobs"))
             for v in ("list", "watch")}
          | {(None, g, r, v, ()) for g, r in (("openreports.io", "reports"), ("wgpolicyk8s.io", "policyreports"))
             for v in ("list", "create", "patch", "delete")}
          | {(None, "", r, "get", ()) for r in ("serviceaccounts", "secrets")}
          | {(None, "events.k8s.io", "events", v, ()) for v in ("create", "patch")}
          | {(NS, "coordination.k8s.io", "leases", v, ("nfguard-controller",)) for v in ("get", "update")}
          | {(NS, "coordination.k8s.io", "leases", "create", ())}
          | {(None, "certificates.k8s.io", "certificatesigningrequests", v, ()) for v in ("list", "watch")}
          | {(None, "certificates.k8s.io", f"certificatesigningrequests/{sub}", "patch", ())
             for sub in ("approval", "status")}
          | {(None, "certificates.k8s.io", "signers", v, ("nfguard.io/reporter-metrics",))
             for v in ("approve", "sign")}
          | {(NS, "", "secrets", "update", ("nfguard-reporter-metrics-ca",))}
          | {(NS, "", "configmaps", v, ("nfguard-reporter-metrics-ca",)) for v in ("get", "update")},
        "nfguard-webhook": {
            (None, nfg, r, v, ()) for r in ("nodenetfilterprofiles", "netfilterpolicies")
            for v in ("list", "watch")
        } | {(None, "", r, v, ()) for r in ("nodes", "namespaces") for v in ("list", "watch")}
          | {(None, "", r, "get", ()) for r in ("serviceaccounts", "secrets")}
          | {(None, "admissionregistration.k8s.io", "validatingwebhookconfigurations", v, ("nfguard",))
             for v in ("get", "patch")}
          | {(NS, "", "secrets", v, ("nfguard-webhook-cert",)) for v in ("get", "update")},
    }
    for sa, want in expected.items():
        got = rules_of(objs, sa)
        if got != want:
            fail(f"RBAC of {sa}: missing {sorted(want - got, key=str)}, extra {sorted(got - want, key=str)}")
    for r in (o for o in objs if o["kind"] == "ClusterRole"):
        for rule in r.get("rules", []):
            if "secrets" in rule.get("resources", []) and set(rule["verbs"]) - {"get"}:
                fail(f"ClusterRole/{r['metadata']['name']}: cluster-wide secrets beyond get")


def rbac_table(doc_path):
    """The RBAC table of docs/install.md as the same tuples rules_of() returns."""
    granted = {}
    with open(doc_path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("| nfguard-"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            sa, groups, resources, verbs, scope = cells[:5]
            names = ()
            if "(`" in resources:
                resources, rest = resources.split("(`", 1)
                names = (rest.split("`", 1)[0],)
            ns = None if scope == "cluster" else scope
            for g in groups.split(","):
                g = g.strip().strip('"')
                for r in resources.split(","):
                    for v in verbs.split(","):
                        granted.setdefault(sa, set()).add((ns, g, r.strip(), v.strip(), names))
    return granted


def check_rbac_doc(objs, doc_path):
    table = rbac_table(doc_path)
    if not table:
        fail(f"{doc_path}: no RBAC table found")
    for sa, want in table.items():
        got = rules_of(objs, sa)
        if got != want:
            fail(f"{doc_path} RBAC table for {sa} differs from manifests/: "
                 f"only in the doc {sorted(want - got, key=str)}, only in manifests {sorted(got - want, key=str)}")


def check_reporter_policy(objs):
    vap = find(objs, "ValidatingAdmissionPolicy", "nfguard-reporter-own-node")
    binding = find(objs, "ValidatingAdmissionPolicyBinding", "nfguard-reporter-own-node")
    if not vap or not binding:
        return
    if binding["spec"]["policyName"] != vap["metadata"]["name"] or "Deny" not in binding["spec"]["validationActions"]:
        fail("reporter policy: the binding must enforce (Deny) the policy")
    conds = " ".join(c["expression"] for c in vap["spec"].get("matchConditions", []))
    if f"system:serviceaccount:{NS}:nfguard-reporter" not in conds:
        fail("reporter policy: must match the reporter's ServiceAccount")
    rules = vap["spec"]["matchConstraints"]["resourceRules"]
    resources = {r for rule in rules for r in rule["resources"]}
    if not {"nodenetfilterprofiles", "nodenetfilterprofiles/status"} <= resources:
        fail("reporter policy: must cover profiles and their status")
    exprs = " ".join(v["expression"] for v in vap["spec"]["validations"])
    if "authentication.kubernetes.io/node-name" not in exprs or "request.name" not in exprs:
        fail("reporter policy: must compare the token's node-name with the profile's name")


def check_reporter_policy_cel(objs):
    """Evaluates the policy's CEL (common-expression-language, the Rust CEL
    interpreter's bindings) on the requests it must tell apart. Standard CEL
    only; the API server's own type checking is not reproduced."""
    vap = find(objs, "ValidatingAdmissionPolicy", "nfguard-reporter-own-node")
    if not vap:
        return
    reporter = f"system:serviceaccount:{NS}:nfguard-reporter"
    claim = "authentication.kubernetes.io/node-name"

    def request(user, name, extra=None, op="UPDATE", obj=None, old=None):
        info = {"username": user}
        if extra is not None:
            info["extra"] = extra
        return {"request": {"userInfo": info, "name": name, "operation": op},
                "object": obj, "oldObject": old}

    def profile(name, node=None, **status):
        p = {"metadata": {"name": name}, "spec": {"nodeName": node or name}}
        if status:
            p["status"] = status
        return p

    owned = {"conditions": [{"type": "Fresh", "status": "True"}],
             "writers": [{"pod": "kube-system/kube-proxy", "container": "kube-proxy", "image": "kp:1"}],
             "newestWriterVersion": "1.8.9", "oldestReaderVersion": "1.8.9"}
    before = profile("w1", lastProbeTime="t1", **owned)
    heartbeat = profile("w1", lastProbeTime="t2", **owned)
    node1 = {claim: ["w1"]}

    def changed(**fields):
        st = dict(owned, lastProbeTime="t2")
        for k, v in fields.items():
            if v is None:
                st.pop(k)
            else:
                st[k] = v
        return profile("w1", **st)

    # (what, request, policy applies, allowed)
    cases = [
        ("reporter's heartbeat on its own profile", request(reporter, "w1", node1, obj=heartbeat, old=before), True, True),
        ("reporter creates its own profile", request(reporter, "w1", node1, "CREATE", profile("w1")), True, True),
        ("reporter's first status, no controller fields yet",
         request(reporter, "w1", node1, obj=profile("w1", lastProbeTime="t1"), old=profile("w1")), True, True),
        ("reporter deletes its own profile (RBAC refuses it)", request(reporter, "w1", node1, "DELETE", None, before), True, True),
        ("reporter writes another node's profile", request(reporter, "w2", node1, obj=profile("w2"), old=profile("w2")), True, False),
        ("reporter token without node claim", request(reporter, "w1", {}, obj=heartbeat, old=before), True, False),
        ("reporter token without extra", request(reporter, "w1", obj=heartbeat, old=before), True, False),
        ("reporter points its profile at another node",
         request(reporter, "w1", node1, obj=profile("w1", "w2"), old=profile("w1")), True, False),
        ("reporter creates its profile for another node", request(reporter, "w1", node1, "CREATE", profile("w1", "w2")), True, False),
        ("reporter writes status.writers", request(reporter, "w1", node1, obj=changed(writers=[]), old=before), True, False),
        ("reporter writes status.newestWriterVersion",
         request(reporter, "w1", node1, obj=changed(newestWriterVersion="1.8.11"), old=before), True, False),
        ("reporter adds newestWriterVersion where there was none",
         request(reporter, "w1", node1, obj=profile("w1", newestWriterVersion="1.8.7"), old=profile("w1")), True, False),
        ("reporter removes status.conditions", request(reporter, "w1", node1, obj=changed(conditions=None), old=before), True, False),
        ("reporter writes status.oldestReaderVersion",
         request(reporter, "w1", node1, obj=changed(oldestReaderVersion="1.8.7"), old=before), True, False),
        ("controller is not constrained", request(f"system:serviceaccount:{NS}:nfguard-controller", "w2"), False, None),
        ("reporter of another namespace is not this one", request(f"system:serviceaccount:{NS}-elsewhere:nfguard-reporter", "w1"), False, None),
    ]
    check_policy_cases(vap, cases, "reporter policy")


def check_policy_cases(vap, cases, label):
    """Evaluates a ValidatingAdmissionPolicy's CEL on (what, context, policy
    applies, allowed) cases as the API server does: matchConditions, then the
    variables in order (each may read the earlier ones), then every
    validation and messageExpression (common-expression-language, the Rust
    CEL interpreter's bindings)."""
    import cel  # pip: common-expression-language

    for what, ctx, applies, allowed in cases:
        try:
            matched = all(cel.evaluate(c["expression"], ctx) is True for c in vap["spec"]["matchConditions"])
            if matched != applies:
                fail(f"{label} CEL: {what}: matchConditions gave {matched}, want {applies}")
                continue
            if not applies:
                continue
            variables = {}
            for v in vap["spec"].get("variables", []):
                variables[v["name"]] = cel.evaluate(v["expression"], dict(ctx, variables=variables))
            ctx = dict(ctx, variables=variables)
            ok = all(cel.evaluate(v["expression"], ctx) is True for v in vap["spec"]["validations"])
            if ok != allowed:
                fail(f"{label} CEL: {what}: allowed={ok}, want {allowed}")
            for v in vap["spec"]["validations"]:
                if "messageExpression" in v and not isinstance(cel.evaluate(v["messageExpression"], ctx), str):
                    fail(f"{label} CEL: messageExpression does not yield a string ({what})")
        except Exception as e:  # the bindings raise their own error types on bad CEL
            fail(f"{label} CEL: {what}: {type(e).__name__}: {e}")


def check_controller_node_policy_cel(objs):
    """Evaluates the controller's Node-writes policy on the requests it must
    tell apart: the controller's own label and taint writes (and their
    removal) pass; any other label, annotation, taint, spec or status
    change is refused; other users are not constrained."""
    vap = find(objs, "ValidatingAdmissionPolicy", "nfguard-controller-node-writes")
    binding = find(objs, "ValidatingAdmissionPolicyBinding", "nfguard-controller-node-writes")
    if not vap or not binding:
        return
    if binding["spec"]["policyName"] != vap["metadata"]["name"] or "Deny" not in binding["spec"]["validationActions"]:
        fail("controller node policy: the binding must enforce (Deny) the policy")
    rules = vap["spec"]["matchConstraints"]["resourceRules"]
    if not any("" in r["apiGroups"] and "nodes" in r["resources"] and "UPDATE" in r["operations"] for r in rules):
        fail("controller node policy: must cover UPDATE of nodes")
    controller = f"system:serviceaccount:{NS}:nfguard-controller"

    def node(labels=None, annotations=None, taints=None, **spec):
        n = {"metadata": {"name": "w1", "labels": {"kubernetes.io/hostname": "w1", **(labels or {})}},
             "spec": {"podCIDR": "10.0.1.0/24", **spec},
             "status": {"nodeInfo": {"kubeletVersion": "v1.33.0"}}}
        if annotations is not None:
            n["metadata"]["annotations"] = annotations
        if taints is not None:
            n["spec"]["taints"] = taints
        return n

    kubelet_taint = {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}
    degraded = {"key": "nfguard.io/netfilter-degraded", "value": "FirewallUnconditionalDrop", "effect": "NoSchedule"}
    before = node({"nfguard.io/iptables-backend": "nft"}, {"node.alpha.kubernetes.io/ttl": "0"}, [kubelet_taint])

    def request(user, obj, old=before, op="UPDATE", sub=None):
        req = {"userInfo": {"username": user}, "name": "w1", "operation": op}
        if sub:
            req["subResource"] = sub
        return {"request": req, "object": obj, "oldObject": old}

    def edit(f):
        n = copy.deepcopy(before)
        f(n)
        return n

    def relabel(n):
        n["metadata"]["labels"].update({"nfguard.io/iptables-backend": "legacy", "nfguard.io/min-reader": "1.8.8"})

    def status_change(n):
        n["status"]["nodeInfo"]["kubeletVersion"] = "v1.34.0"

    # (what, request, policy applies, allowed)
    cases = [
        ("controller relabels nfguard.io/ labels", request(controller, edit(relabel)), True, True),
        ("controller removes an nfguard.io/ label",
         request(controller, edit(lambda n: n["metadata"]["labels"].pop("nfguard.io/iptables-backend"))), True, True),
        ("controller labels a node that had no labels",
         request(controller, {"metadata": {"name": "w1", "labels": {"nfguard.io/iptables-backend": "nft"}}},
                 {"metadata": {"name": "w1"}}), True, True),
        ("controller adds its taint after the kubelet's",
         request(controller, edit(lambda n: n["spec"]["taints"].append(degraded))), True, True),
        ("controller removes its taint",
         request(controller, before, edit(lambda n: n["spec"]["taints"].append(degraded))), True, True),
        ("controller taints a node that had no taints",
         request(controller, edit(lambda n: n["spec"].update(taints=[degraded])),
                 edit(lambda n: n["spec"].pop("taints"))), True, True),
        ("controller adds a label that is not nfguard's",
         request(controller, edit(lambda n: n["metadata"]["labels"].update({"team": "net"}))), True, False),
        ("controller removes a kubelet label",
         request(controller, edit(lambda n: n["metadata"]["labels"].pop("kubernetes.io/hostname"))), True, False),
        ("controller changes a kubelet label",
         request(controller, edit(lambda n: n["metadata"]["labels"].update({"kubernetes.io/hostname": "w2"}))), True, False),
        ("controller adds an annotation",
         request(controller, edit(lambda n: n["metadata"]["annotations"].update({"a": "b"}))), True, False),
        ("controller removes every annotation",
         request(controller, edit(lambda n: n["metadata"].pop("annotations"))), True, False),
        ("controller removes another taint", request(controller, edit(lambda n: n["spec"].pop("taints"))), True, False),
        ("controller changes another taint's effect",
         request(controller, edit(lambda n: n["spec"]["taints"][0].update(effect="NoExecute"))), True, False),
        ("controller adds a taint that is not nfguard's",
         request(controller, edit(lambda n: n["spec"]["taints"].append({"key": "x", "effect": "NoSchedule"}))), True, False),
        ("controller sets a NoExecute nfguard.io/ taint",
         request(controller, edit(lambda n: n["spec"]["taints"].append(dict(degraded, effect="NoExecute")))), True, False),
        ("controller marks the node unschedulable",
         request(controller, edit(lambda n: n["spec"].update(unschedulable=True))), True, False),
        ("controller changes spec.podCIDR",
         request(controller, edit(lambda n: n["spec"].update(podCIDR="10.0.9.0/24"))), True, False),
        ("controller removes spec.podCIDR", request(controller, edit(lambda n: n["spec"].pop("podCIDR"))), True, False),
        ("controller writes the node's status", request(controller, edit(status_change), sub="status"), True, False),
        ("controller adds a finalizer",
         request(controller, edit(lambda n: n["metadata"].update(finalizers=["x/y"]))), True, False),
        ("controller creates a node", request(controller, before, None, "CREATE"), True, False),
        ("controller deletes a node", request(controller, None, before, "DELETE"), True, False),
        ("the kubelet is not constrained", request("system:node:w1", edit(lambda n: n["spec"].update(unschedulable=True))), False, None),
        ("a controller of another namespace is not this one",
         request(f"system:serviceaccount:{NS}-elsewhere:nfguard-controller", before), False, None),
    ]
    check_policy_cases(vap, cases, "controller node policy")


def enforced_policy(objs, name, label):
    """The ValidatingAdmissionPolicy `name`, if its binding enforces it."""
    vap = find(objs, "ValidatingAdmissionPolicy", name)
    binding = find(objs, "ValidatingAdmissionPolicyBinding", name)
    if not vap or not binding:
        return None
    if binding["spec"]["policyName"] != name or "Deny" not in binding["spec"]["validationActions"]:
        fail(f"{label}: the binding must enforce (Deny) the policy")
    return vap


def admission(user, op, obj, old, name="nfguard", namespace="", sub=None):
    req = {"userInfo": {"username": user}, "name": name, "namespace": namespace, "operation": op}
    if sub:
        req["subResource"] = sub
    return {"request": req, "object": obj, "oldObject": old}


def check_webhook_configuration_policy_cel(objs):
    """The webhook's writes of its own configuration: only caBundle changes."""
    vap = enforced_policy(objs, "nfguard-webhook-ca-bundle", "webhook configuration policy")
    if not vap:
        return
    webhook = f"system:serviceaccount:{NS}:nfguard-webhook"
    hook = {"name": "pods.nfguard.io", "failurePolicy": "Fail", "matchPolicy": "Equivalent", "sideEffects": "None",
            "timeoutSeconds": 10, "admissionReviewVersions": ["v1"], "namespaceSelector": {}, "objectSelector": {},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "matchConditions": [{"name": "gated", "expression": "true"}],
            "clientConfig": {"service": {"namespace": NS, "name": "nfguard-webhook", "path": "/validate", "port": 443}}}
    before = {"metadata": {"name": "nfguard", "labels": {"app.kubernetes.io/name": "nfguard"}},
              "webhooks": [hook, dict(copy.deepcopy(hook), name="workloads.nfguard.io")]}

    def edit(f, base=before):
        v = copy.deepcopy(base)
        f(v)
        return v

    def bundle(v, ca="Q0E="):
        for h in v["webhooks"]:
            h["clientConfig"]["caBundle"] = ca

    with_ca = edit(bundle)

    def h0(f):
        return edit(lambda v: f(v["webhooks"][0]), with_ca)

    def update(obj, old=with_ca, user=webhook):
        return admission(user, "UPDATE", obj, old)

    cases = [
        ("webhook sets the caBundle of every webhook", update(with_ca, before), True, True),
        ("webhook rotates the caBundle", update(edit(lambda v: bundle(v, "TkVX"), with_ca)), True, True),
        ("webhook changes nothing", update(with_ca), True, True),
        ("webhook turns failurePolicy to Ignore", update(h0(lambda h: h.update(failurePolicy="Ignore"))), True, False),
        ("webhook narrows the rules", update(h0(lambda h: h.update(rules=[]))), True, False),
        ("webhook adds a namespaceSelector",
         update(h0(lambda h: h.update(namespaceSelector={"matchLabels": {"x": "y"}}))), True, False),
        ("webhook removes the matchConditions", update(h0(lambda h: h.pop("matchConditions"))), True, False),
        ("webhook adds a field", update(h0(lambda h: h.update(reinvocationPolicy="Never"))), True, False),
        ("webhook points the gate at a URL",
         update(h0(lambda h: h["clientConfig"].update(url="https://127.0.0.1/"))), True, False),
        ("webhook points the gate at another Service",
         update(h0(lambda h: h["clientConfig"]["service"].update(name="other"))), True, False),
        ("webhook removes a webhook", update(edit(lambda v: v["webhooks"].pop(), with_ca)), True, False),
        ("webhook renames a webhook", update(h0(lambda h: h.update(name="other.nfguard.io"))), True, False),
        ("webhook relabels its configuration",
         update(edit(lambda v: v["metadata"]["labels"].update(x="y"), with_ca)), True, False),
        ("webhook adds an owner reference (the garbage collector would delete the gate)",
         update(edit(lambda v: v["metadata"].update(ownerReferences=[{"uid": "gone"}]), with_ca)), True, False),
        ("webhook deletes its configuration", admission(webhook, "DELETE", None, with_ca), True, False),
        ("webhook creates a configuration", admission(webhook, "CREATE", with_ca, None), True, False),
        ("an administrator is not constrained", update(h0(lambda h: h.update(failurePolicy="Ignore")), user="admin"),
         False, None),
    ]
    check_policy_cases(vap, cases, "webhook configuration policy")


def check_controller_report_policy_cel(objs):
    """The controller's report writes: nfguard's reports only."""
    vap = enforced_policy(objs, "nfguard-controller-report-writes", "controller report policy")
    if not vap:
        return
    controller = f"system:serviceaccount:{NS}:nfguard-controller"

    def report(managed_by="nfguard", **labels):
        r = {"metadata": {"name": "nfguard-pod-a", "namespace": "team", "labels": dict(labels)}, "results": []}
        if managed_by is not None:
            r["metadata"]["labels"]["app.kubernetes.io/managed-by"] = managed_by
        return r

    ours, kyverno = report(), report("kyverno")
    unlabelled = {"metadata": {"name": "x", "namespace": "team"}}

    def req(op, obj, old, user=controller):
        return admission(user, op, obj, old, "nfguard-pod-a", "team")

    cases = [
        ("controller creates its report", req("CREATE", ours, None), True, True),
        ("controller updates its report", req("UPDATE", report(extra="1"), ours), True, True),
        ("controller deletes its report", req("DELETE", None, ours), True, True),
        ("controller creates a report that is not nfguard's", req("CREATE", kyverno, None), True, False),
        ("controller creates an unlabelled report", req("CREATE", unlabelled, None), True, False),
        ("controller rewrites Kyverno's report", req("UPDATE", kyverno, kyverno), True, False),
        ("controller adopts Kyverno's report", req("UPDATE", ours, kyverno), True, False),
        ("controller gives its report away", req("UPDATE", kyverno, ours), True, False),
        ("controller deletes Kyverno's report", req("DELETE", None, kyverno), True, False),
        ("controller deletes an unlabelled report", req("DELETE", None, unlabelled), True, False),
        ("Kyverno is not constrained", req("UPDATE", kyverno, kyverno, "system:serviceaccount:kyverno:kyverno"),
         False, None),
    ]
    check_policy_cases(vap, cases, "controller report policy")


def check_controller_profile_policy_cel(objs):
    """The controller's profile writes: its own status fields only."""
    vap = enforced_policy(objs, "nfguard-controller-profile-writes", "controller profile policy")
    if not vap:
        return
    controller = f"system:serviceaccount:{NS}:nfguard-controller"
    before = {"metadata": {"name": "w1", "labels": {"a": "b"}}, "spec": {"nodeName": "w1"},
              "status": {"lastProbeTime": "t1", "minReaderVersion": "1.8.8", "hazards": [{"type": "X"}],
                         "conditions": [{"type": "Fresh", "status": "True"}], "writers": []}}

    def edit(f, base=before):
        v = copy.deepcopy(base)
        f(v)
        return v

    def status(**fields):
        return edit(lambda v: v["status"].update(fields))

    def update(obj, old=before, user=controller):
        return admission(user, "UPDATE", obj, old, "w1", sub="status")

    cases = [
        ("controller writes its conditions and writers",
         update(status(conditions=[{"type": "Fresh", "status": "False"}], writers=[{"pod": "p"}])), True, True),
        ("controller adds newestWriterVersion and oldestReaderVersion",
         update(status(newestWriterVersion="1.8.11", oldestReaderVersion="1.8.7")), True, True),
        ("controller drops its writers", update(edit(lambda v: v["status"].pop("writers"))), True, True),
        ("controller's first status on a profile without one",
         update(edit(lambda v: v.update(status={"conditions": []}), {"metadata": {"name": "w1"}}),
                {"metadata": {"name": "w1"}}), True, True),
        ("controller changes the node's minReaderVersion", update(status(minReaderVersion="1.8.7")), True, False),
        ("controller removes the node's hazards", update(edit(lambda v: v["status"].pop("hazards"))), True, False),
        ("controller adds a node fact", update(status(ipForward=False)), True, False),
        ("controller moves the heartbeat", update(status(lastProbeTime="t9")), True, False),
        ("controller points the profile at another node",
         admission(controller, "UPDATE", edit(lambda v: v["spec"].update(nodeName="w2")), before, "w1"), True, False),
        ("controller relabels the profile",
         admission(controller, "UPDATE", edit(lambda v: v["metadata"]["labels"].update(a="c")), before, "w1"), True, False),
        ("controller creates a profile", admission(controller, "CREATE", before, None, "w1"), True, False),
        ("the reporter is not constrained by this policy",
         update(status(minReaderVersion="1.8.7"), user=f"system:serviceaccount:{NS}:nfguard-reporter"), False, None),
    ]
    check_policy_cases(vap, cases, "controller profile policy")


GATE_TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e", "gate-match.yaml")


def check_webhook_match_conditions_cel(objs):
    """Evaluates the webhook configuration's matchConditions on the table
    e2e/gate-match.yaml (which tests/it/gate_match.rs holds the webhook's Rust
    test to) and on Pod UPDATEs: the API server must send nfguard exactly
    what it judges. trim() and upperAscii() (Kubernetes' CEL string library)
    are supplied here as Go defines them."""
    import cel

    vwc = find(objs, "ValidatingWebhookConfiguration", "nfguard")
    if not vwc:
        return
    conds = vwc["webhooks"][0].get("matchConditions", [])
    if not conds:
        fail("webhook configuration: no matchConditions (every pod would wait on the webhook)")
        return

    def sends(req, obj, old=None):
        ctx = cel.Context()
        ctx.add_function("trim", lambda t: t.strip())
        ctx.add_function("upperAscii", lambda t: "".join(c.upper() if "a" <= c <= "z" else c for c in t))
        ctx.add_variable("request", req)
        ctx.add_variable("object", obj)
        ctx.add_variable("oldObject", old)
        return all(cel.evaluate(c["expression"], ctx) is True for c in conds)

    with open(GATE_TABLE, encoding="utf-8") as f:
        table = [o for o in yaml.safe_load_all(f) if o]
    for o in table:
        name = o["metadata"]["name"]
        want = o["metadata"]["annotations"]["nfguard-e2e/reaches-gate"] == "yes"
        try:
            got = sends({"kind": {"kind": o["kind"]}, "operation": "CREATE"}, o)
        except Exception as e:
            fail(f"webhook matchConditions CEL: {name}: {type(e).__name__}: {e}")
            continue
        if got != want:
            fail(f"webhook matchConditions CEL: {name} reaches the webhook: {got}, want {want} ({GATE_TABLE})")
    pod = next(o for o in table if o["metadata"]["name"] == "net-admin")
    swapped = copy.deepcopy(pod)
    swapped["spec"]["containers"][0]["image"] = "other:1"
    relabelled = copy.deepcopy(pod)
    relabelled["metadata"]["labels"] = {"a": "b"}
    plain = next(o for o in table if o["metadata"]["name"] == "plain")
    plain_swapped = copy.deepcopy(plain)
    plain_swapped["spec"]["containers"][0]["image"] = "other:1"
    debug = copy.deepcopy(plain)
    debug["spec"]["ephemeralContainers"] = [{"name": "d", "image": "x", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]
    update = {"kind": {"kind": "Pod"}, "operation": "UPDATE"}
    for what, req, obj, old, want in [
        ("a NET_ADMIN pod's image swapped", update, swapped, pod, True),
        ("a NET_ADMIN pod relabelled", update, relabelled, pod, False),
        ("a plain pod's image swapped", update, plain_swapped, plain, False),
        ("a NET_ADMIN debug container added", dict(update, subResource="ephemeralcontainers"), debug, plain, True),
    ]:
        try:
            got = sends(req, obj, old)
        except Exception as e:
            fail(f"webhook matchConditions CEL: {what}: {type(e).__name__}: {e}")
            continue
        if got != want:
            fail(f"webhook matchConditions CEL: {what} reaches the webhook: {got}, want {want}")


DIGESTS_POLICY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "manifests",
                              "require-image-digests", "policy.yaml")


def check_require_digests_cel(objs):
    """The opt-in policy nfguard-require-image-digests (from the render when
    the component is in it, else from its file): gated pods and templates by
    tag refused with a message naming the container, by digest admitted,
    ordinary ones untouched. trim() and upperAscii() as in the webhook's
    matchConditions check."""
    import cel

    vap = next((o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"
                and o["metadata"]["name"] == "nfguard-require-image-digests"), None)
    if vap is None:
        with open(DIGESTS_POLICY, encoding="utf-8") as f:
            vap = next(o for o in yaml.safe_load_all(f) if o and o["kind"] == "ValidatingAdmissionPolicy")
    digest = "reg.test/cni@sha256:" + "a" * 64

    def evaluate(expr, req, obj, variables=None):
        ctx = cel.Context()
        ctx.add_function("trim", lambda t: t.strip())
        ctx.add_function("upperAscii", lambda t: "".join(c.upper() if "a" <= c <= "z" else c for c in t))
        ctx.add_variable("request", req)
        ctx.add_variable("object", obj)
        ctx.add_variable("variables", variables or {})
        return cel.evaluate(expr, ctx)

    def pod(*images, host=True, init=()):
        spec = {"containers": [{"name": f"c{i}", "image": im} for i, im in enumerate(images)]}
        if init:
            spec["initContainers"] = [{"name": f"i{i}", "image": im} for i, im in enumerate(init)]
        if host:
            spec["hostNetwork"] = True
        return spec

    net_admin = {"containers": [{"name": "c", "image": "reg.test/cni:1",
                                 "securityContext": {"capabilities": {"add": ["net_admin"]}}}]}
    cases = [  # (what, kind, spec, applies, allowed, message part)
        ("a hostNetwork pod by tag", "Pod", pod("reg.test/cni:1"), True, False, "container c0 names reg.test/cni:1"),
        ("a hostNetwork pod by digest", "Pod", pod(digest), True, True, None),
        ("a hostNetwork pod by tag and digest", "Pod", pod("reg.test/cni:1@sha256:" + "b" * 64), True, True, None),
        ("an init container by tag", "Pod", pod(digest, init=("reg.test/init:1",)), True, False, "container i0"),
        ("two containers by tag", "Pod", pod("a:1", "b:1"), True, False, "(and 1 more)"),
        ("a NET_ADMIN (any case) DaemonSet template by tag", "DaemonSet", net_admin, True, False, "this DaemonSet"),
        ("a CronJob's hostNetwork template by tag", "CronJob", pod("reg.test/cni:1"), True, False, None),
        ("an ordinary pod by tag", "Pod", pod("reg.test/app:1", host=False), False, None, None),
    ]
    for what, kind, spec, applies, allowed, part in cases:
        if kind == "Pod":
            obj = {"spec": spec}
        elif kind == "CronJob":
            obj = {"spec": {"jobTemplate": {"spec": {"template": {"spec": spec}}}}}
        else:
            obj = {"spec": {"template": {"spec": spec}}}
        req = {"kind": {"kind": kind}, "operation": "CREATE", "name": "x"}
        try:
            matched = all(evaluate(c["expression"], req, obj) is True for c in vap["spec"]["matchConditions"])
            if matched != applies:
                fail(f"require-image-digests CEL: {what}: matchConditions gave {matched}, want {applies}")
                continue
            if not applies:
                continue
            variables = {}
            for v in vap["spec"]["variables"]:
                variables[v["name"]] = evaluate(v["expression"], req, obj, variables)
            results = [evaluate(v["expression"], req, obj, variables) for v in vap["spec"]["validations"]]
            if all(r is True for r in results) != allowed:
                fail(f"require-image-digests CEL: {what}: allowed={not allowed}, want {allowed}")
            if not allowed:
                msg = evaluate(vap["spec"]["validations"][0]["messageExpression"], req, obj, variables)
                if not isinstance(msg, str) or (part and part not in msg):
                    fail(f"require-image-digests CEL: {what}: message {msg!r} does not say {part!r}")
        except Exception as e:  # the bindings raise their own error types on bad CEL
            fail(f"require-image-digests CEL: {what}: {type(e).__name__}: {e}")


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        objs = [o for o in yaml.safe_load_all(f) if o]
    for check in (check_namespaces, check_custom_resources, check_reporter,
                  check_webhook, check_rbac, check_reporter_policy,
                  check_reporter_policy_cel, check_controller_node_policy_cel,
                  check_webhook_configuration_policy_cel, check_controller_report_policy_cel,
                  check_controller_profile_policy_cel, check_webhook_match_conditions_cel,
                  check_require_digests_cel):
        try:
            check(objs)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            fail(f"{check.__name__}: malformed manifest ({type(e).__name__}: {e})")
    if len(sys.argv) == 3:
        check_rbac_doc(objs, sys.argv[2])
    for e in errors:
        print(f"check_manifests: {e}")
    print(f"check_manifests: {len(objs)} objects, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
