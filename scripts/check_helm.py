#!/usr/bin/env python3
"""Checks renders of the Helm chart charts/nfguard (scripts/check-helm.sh
runs it; tests/install_helm.rs runs that).

  check_helm.py same CHART.yaml KUSTOMIZE.yaml
      the chart's default render equals manifests/ object by object; every
      difference is printed as `Kind namespace/name: field.path: ...`
  check_helm.py namespace CHART.yaml NS
      a render with --namespace NS puts every namespaced object in NS and
      points every namespace reference (RBAC subjects, the webhook's service
      and its own-namespace exclusion, the reporter policy) at NS
  check_helm.py values CHART.yaml VALUES.yaml DEFAULTS.yaml
      a render with VALUES.yaml shows the effect of every value it sets, and
      VALUES.yaml sets every value of DEFAULTS.yaml (the chart's values.yaml)
      to something else, so no value goes untested
  check_helm.py policy CHART.yaml VALUES.yaml
      a render with VALUES.yaml and defaultPolicy.enabled=true carries
      defaultPolicy.spec as the default NetfilterPolicy's spec
  check_helm.py readme DEFAULTS.yaml README.md
      every value of values.yaml is a row of the README's values table

Prints one line per problem and exits 1 if there is any.
"""
import sys

import yaml

CLUSTER_SCOPED = {
    "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
    "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "NetfilterPolicy",
}
# Objects manifests/ has and the chart must not: Helm stores the release in
# its namespace before it creates any object, so the namespace exists before
# the chart is applied (helm install --create-namespace, or created and
# labelled beforehand: charts/nfguard/README.md, "Namespace").
ONLY_IN_MANIFESTS = {("Namespace", None, "nfguard-system")}
COMPONENTS = ("reporter", "controller", "webhook")
WORKLOADS = {"reporter": "DaemonSet", "controller": "Deployment", "webhook": "Deployment"}

problems = []


def fail(msg):
    problems.append(msg)


def load(path):
    with open(path, encoding="utf-8") as f:
        return [o for o in yaml.safe_load_all(f) if o]


def key(o):
    return (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])


def ident(k):
    kind, ns, name = k
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def index(objs, what):
    out = {}
    for o in objs:
        if key(o) in out:
            fail(f"{what}: {ident(key(o))} appears twice")
        out[key(o)] = o
    return out


# ---- same: the default render equals manifests/ ---------------------------

def differences(a, b, path=""):
    """Field paths where a and b differ, with both values (a: manifests/)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in b:
                out.append(f"{p}: only in manifests/ ({a[k]!r})")
            elif k not in a:
                out.append(f"{p}: only in the chart ({b[k]!r})")
            else:
                out.extend(differences(a[k], b[k], p))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items in manifests/, {len(b)} in the chart"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out.extend(differences(x, y, f"{path}[{i}]"))
        return out
    # Typed: "2" (a string) and 2 (a number) are different manifests.
    if type(a) is not type(b) or a != b:
        return [f"{path}: manifests/ {a!r}, chart {b!r}"]
    return []


def check_same(chart_path, kustomize_path):
    chart = index(load(chart_path), "chart")
    manifests = index(load(kustomize_path), "manifests/")
    for k in sorted(set(manifests) - set(chart), key=str):
        if k not in ONLY_IN_MANIFESTS:
            fail(f"{ident(k)}: in manifests/, missing from the chart")
    for k in sorted(set(chart) - set(manifests), key=str):
        fail(f"{ident(k)}: rendered by the chart, not in manifests/")
    for k in ONLY_IN_MANIFESTS:
        if k not in manifests:
            fail(f"{ident(k)}: expected in manifests/ (the one object the chart leaves to Helm); update ONLY_IN_MANIFESTS")
    compared = 0
    for k in sorted(set(chart) & set(manifests), key=str):
        compared += 1
        for d in differences(manifests[k], chart[k]):
            fail(f"{ident(k)}: {d}")
    print(f"check_helm: {compared} objects compared, {len(ONLY_IN_MANIFESTS)} left to Helm (the Namespace)")


# ---- namespace: every reference follows the release namespace --------------

def check_namespace(chart_path, ns):
    objs = load(chart_path)
    for o in objs:
        k = key(o)
        if o["kind"] in CLUSTER_SCOPED:
            if k[1] is not None:
                fail(f"{ident(k)}: cluster-scoped but has a namespace")
        elif k[1] != ns:
            fail(f"{ident(k)}: namespace {k[1]!r}, not the release namespace {ns}")
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            for s in o.get("subjects", []):
                if s.get("kind") == "ServiceAccount" and s.get("namespace") != ns:
                    fail(f"{ident(k)}: subject {s['name']} in {s.get('namespace')!r}, not {ns}")
    by_key = {key(o): o for o in objs}
    vwc = by_key.get(("ValidatingWebhookConfiguration", None, "nfguard"))
    if not vwc:
        fail("ValidatingWebhookConfiguration nfguard: not rendered")
    else:
        hook = vwc["webhooks"][0]
        ref = hook["clientConfig"]["service"]
        if ref.get("namespace") != ns:
            fail(f"ValidatingWebhookConfiguration nfguard: webhooks[0].clientConfig.service.namespace is {ref.get('namespace')!r}, not {ns}")
        excluded = [e for e in hook.get("namespaceSelector", {}).get("matchExpressions", [])
                    if e.get("key") == "kubernetes.io/metadata.name" and e.get("operator") == "NotIn"]
        if not excluded or excluded[0].get("values") != [ns]:
            fail(f"ValidatingWebhookConfiguration nfguard: webhooks[0].namespaceSelector does not exclude exactly {ns}: {excluded}")
    vap = by_key.get(("ValidatingAdmissionPolicy", None, "nfguard-reporter-own-node"))
    if not vap:
        fail("ValidatingAdmissionPolicy nfguard-reporter-own-node: not rendered")
    else:
        want = f"'system:serviceaccount:{ns}:nfguard-reporter'"
        exprs = [c["expression"] for c in vap["spec"].get("matchConditions", [])]
        if not any(want in e for e in exprs):
            fail(f"ValidatingAdmissionPolicy nfguard-reporter-own-node: spec.matchConditions do not name {want}: {exprs}")
    if ns != "nfguard-system":
        text = yaml.safe_dump_all(objs)
        if "nfguard-system" in text:
            lines = [line.strip() for line in text.splitlines() if "nfguard-system" in line]
            fail(f"the default namespace nfguard-system is still spelled in a render for {ns}: {lines[:5]}")
    print(f"check_helm: {len(objs)} objects follow the release namespace {ns}")


# ---- values: the effect of every value -------------------------------------

def leaves(values, prefix=""):
    """Dotted paths of the values a user sets as a whole: scalars, lists and
    the maps that are passed through as they are (resources, selectors, ...)."""
    out = {}
    for k, v in values.items():
        p = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict) and v and not p.endswith(PASSED_THROUGH):
            out.update(leaves(v, p))
        else:
            out[p] = v
    return out


# Maps the templates copy whole (toYaml): tested as one value.
PASSED_THROUGH = (".resources", "nodeSelector", "affinity", "objectSelector",
                  "serviceMonitor.labels", "namespaceSelector.matchLabels",
                  "defaultPolicy.spec")


def get(values, path):
    v = values
    for part in path.split("."):
        v = v[part]
    return v


def workload(by_key, c, ns):
    return by_key.get((WORKLOADS[c], ns, f"nfguard-{c}"))


def container(by_key, c, ns):
    w = workload(by_key, c, ns)
    return w["spec"]["template"]["spec"]["containers"][0] if w else {}


def pod(by_key, c, ns):
    w = workload(by_key, c, ns)
    return w["spec"]["template"]["spec"] if w else {}


def expect(what, got, want):
    if got != want:
        fail(f"{what}: is {got!r}, want {want!r}")


def env_value(c, name):
    hits = [e.get("value") for e in c.get("env", []) if e["name"] == name]
    return hits[0] if len(hits) == 1 else (None if not hits else f"{len(hits)} entries")


def check_values(chart_path, values_path, defaults_path):
    with open(values_path, encoding="utf-8") as f:
        values = yaml.safe_load(f)
    with open(defaults_path, encoding="utf-8") as f:
        defaults = yaml.safe_load(f)
    # Every value is set, to something other than its default.
    got, default = leaves(values), leaves(defaults)
    for path in sorted(set(default) - set(got)):
        fail(f"{values_path}: does not set {path} (every value must be exercised)")
    for path in sorted(set(got) - set(default)):
        fail(f"{values_path}: sets {path}, which values.yaml does not have")
    for path in sorted(set(got) & set(default)):
        if got[path] == default[path]:
            fail(f"{values_path}: {path} equals its default {default[path]!r}, so its effect is not seen")
    if problems:
        return
    objs = load(chart_path)
    by_key = {key(o): o for o in objs}
    ns_of = {o["metadata"].get("namespace") for o in objs if o["kind"] in WORKLOADS.values()}
    if len(ns_of) != 1:
        fail(f"workloads in several namespaces: {ns_of}")
        return
    (ns,) = ns_of
    checked = set()

    def check(path, fn):
        checked.add(path)
        fn(get(values, path))

    img = values["image"]
    for c in COMPONENTS:
        expect(f"{c} image", container(by_key, c, ns).get("image"), f"{img['repository']}:{img['tag']}")
        expect(f"{c} imagePullPolicy", container(by_key, c, ns).get("imagePullPolicy"), img["pullPolicy"])
        expect(f"{c} imagePullSecrets", pod(by_key, c, ns).get("imagePullSecrets"), values["imagePullSecrets"])
        expect(f"{c} NFGUARD_LOG", env_value(container(by_key, c, ns), "NFGUARD_LOG"), values["log"]["level"])
        expect(f"{c} NFGUARD_LOG_FORMAT", env_value(container(by_key, c, ns), "NFGUARD_LOG_FORMAT"), values["log"]["format"])
        port = values["metrics"]["port"]
        cont = container(by_key, c, ns)
        args = cont.get("args", [])
        listen = args[args.index("--metrics-listen") + 1] if "--metrics-listen" in args else None
        expect(f"{c} --metrics-listen", listen, f"0.0.0.0:{port}")
        expect(f"{c} metrics containerPort",
               [p["containerPort"] for p in cont.get("ports", []) if p["name"] == "metrics"], [port])
        comp = values[c]
        expect(f"{c} resources", cont.get("resources"), comp["resources"])
        p = pod(by_key, c, ns)
        for field in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
            expect(f"{c} {field}", p.get(field), comp[field])
            checked.add(f"{c}.{field}")
        for e in comp["extraEnv"]:
            expect(f"{c} env {e['name']}", env_value(cont, e["name"]), e["value"])
        checked |= {f"{c}.resources", f"{c}.extraEnv"}
    checked |= {"image.repository", "image.tag", "image.pullPolicy",
                "imagePullSecrets", "log.level", "log.format", "metrics.port"}

    for c in ("controller", "webhook"):
        check(f"{c}.replicas", lambda r, c=c: expect(f"{c} replicas", workload(by_key, c, ns)["spec"]["replicas"], r))
    pdb = by_key.get(("PodDisruptionBudget", ns, "nfguard-webhook"))
    if (pdb is not None) != (values["webhook"]["replicas"] > 1):
        fail(f"PodDisruptionBudget {ns}/nfguard-webhook rendered={pdb is not None} with webhook.replicas={values['webhook']['replicas']} (only with more than one)")

    hook = by_key[("ValidatingWebhookConfiguration", None, "nfguard")]["webhooks"][0]
    check("webhook.failurePolicy", lambda v: expect("webhook failurePolicy", hook["failurePolicy"], v))
    check("webhook.timeoutSeconds", lambda v: expect("webhook timeoutSeconds", hook["timeoutSeconds"], v))
    sel = hook.get("namespaceSelector", {})
    check("webhook.namespaceSelector.matchLabels",
          lambda v: expect("webhook namespaceSelector.matchLabels", sel.get("matchLabels"), v))
    own = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [ns]}
    check("webhook.namespaceSelector.matchExpressions",
          lambda v: expect("webhook namespaceSelector.matchExpressions (own namespace excluded first)",
                           sel.get("matchExpressions"), [own] + v))
    check("webhook.objectSelector", lambda v: expect("webhook objectSelector", hook.get("objectSelector"), v))

    policy = by_key.get(("NetfilterPolicy", None, "default"))
    check("defaultPolicy.enabled",
          lambda v: expect("NetfilterPolicy default rendered", policy is not None, v))
    # Its effect needs the policy enabled, which these values turn off: the
    # `policy` command checks it on a second render.
    checked.add("defaultPolicy.spec")

    sm = by_key.get(("ServiceMonitor", ns, "nfguard"))
    svc = by_key.get(("Service", ns, "nfguard-metrics"))
    check("metrics.serviceMonitor.enabled",
          lambda v: expect("ServiceMonitor and metrics Service rendered", (sm is not None, svc is not None), (v, v)))
    if sm and svc:
        check("metrics.serviceMonitor.interval",
              lambda v: expect("ServiceMonitor interval", sm["spec"]["endpoints"][0]["interval"], v))
        check("metrics.serviceMonitor.labels",
              lambda v: expect("ServiceMonitor labels ⊇ serviceMonitor.labels",
                               {k: sm["metadata"]["labels"].get(k) for k in v}, v))
        expect("ServiceMonitor selects the metrics Service",
               all(svc["metadata"]["labels"].get(k) == x for k, x in sm["spec"]["selector"]["matchLabels"].items()), True)
        expect("metrics Service port", svc["spec"]["ports"][0]["port"], values["metrics"]["port"])
        relabel = sm["spec"]["endpoints"][0].get("relabelings", [])
        expect("ServiceMonitor job label (nfguard-<component>)",
               [(r.get("sourceLabels"), r.get("replacement")) for r in relabel if r.get("targetLabel") == "job"],
               [(["__meta_kubernetes_pod_label_app_kubernetes_io_component"], "nfguard-$1")])
        for c in COMPONENTS:
            labels = workload(by_key, c, ns)["spec"]["template"]["metadata"]["labels"]
            expect(f"metrics Service selects the {c} pods",
                   all(labels.get(k) == x for k, x in svc["spec"]["selector"].items()), True)

    # Every value set here has a check.
    for path in sorted(set(leaves(values)) - checked):
        fail(f"check_helm.py: no check for the value {path}")
    print(f"check_helm: {len(checked)} values checked in a render of {len(objs)} objects")


def check_policy(chart_path, values_path):
    """A render with VALUES.yaml and defaultPolicy.enabled=true: the
    NetfilterPolicy default carries defaultPolicy.spec unchanged."""
    with open(values_path, encoding="utf-8") as f:
        want = yaml.safe_load(f)["defaultPolicy"]["spec"]
    policies = [o for o in load(chart_path) if o["kind"] == "NetfilterPolicy"]
    if [p["metadata"]["name"] for p in policies] != ["default"]:
        fail(f"expected exactly the NetfilterPolicy default, found {[p['metadata']['name'] for p in policies]}")
        return
    expect("NetfilterPolicy default spec", policies[0]["spec"], want)
    print("check_helm: the default NetfilterPolicy carries defaultPolicy.spec")


def check_readme(defaults_path, readme_path):
    with open(defaults_path, encoding="utf-8") as f:
        defaults = yaml.safe_load(f)
    with open(readme_path, encoding="utf-8") as f:
        rows = {line.split("|")[1].strip().strip("`") for line in f if line.startswith("| `")}
    paths = leaves(defaults)
    for path in sorted(paths):
        if path not in rows:
            fail(f"{readme_path}: the values table has no row for {path}")
    for row in sorted(rows - set(paths)):
        fail(f"{readme_path}: the values table documents {row}, which values.yaml does not have")
    print(f"check_helm: {len(paths)} values documented in {readme_path}")


def main():
    commands = {"same": (check_same, 2), "namespace": (check_namespace, 2),
                "values": (check_values, 3), "policy": (check_policy, 2),
                "readme": (check_readme, 2)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) - 2 != commands[sys.argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    fn, _ = commands[sys.argv[1]]
    try:
        fn(*sys.argv[2:])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        fail(f"malformed render or values ({type(e).__name__}: {e})")
    except (OSError, yaml.YAMLError) as e:
        fail(f"cannot read input: {e}")
    for p in problems:
        print(f"check_helm: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
