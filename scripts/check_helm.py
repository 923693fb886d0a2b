#!/usr/bin/env python3
"""Checks renders of the Helm chart charts/nfguard (scripts/check-helm.sh
runs it; tests/it/install_helm.rs runs that).

  check_helm.py same CHART.yaml KUSTOMIZE.yaml
      the chart's default render equals manifests/ object by object; every
      difference is printed as `Kind namespace/name: field.path: ...`
  check_helm.py monitoring CHART_ON.yaml CHART.yaml KUSTOMIZE.yaml
      a render with the three monitoring.*.enabled in nfguard-system adds to
      the default render (CHART.yaml) exactly the objects of `kustomize build
      monitoring/`, field by field (the dashboard's JSON byte for byte, the
      rules' {{ $labels.* }} text verbatim), and changes nothing else
  check_helm.py namespace CHART.yaml NS
      a render with --namespace NS (monitoring enabled) puts every namespaced
      object in NS and points every namespace reference (RBAC subjects, the
      webhook's service and its own-namespace exclusion, the reporter's and the
      controller's admission policies)
      at NS; each PodMonitor selects its component's pods in NS
  check_helm.py values CHART.yaml VALUES.yaml DEFAULTS.yaml
      a render with VALUES.yaml shows the effect of every value it sets, and
      VALUES.yaml sets every value of DEFAULTS.yaml (the chart's values.yaml)
      to something else, so no value goes untested
  check_helm.py policy CHART.yaml VALUES.yaml
      a render with VALUES.yaml and defaultPolicy.enabled=true carries
      defaultPolicy.spec as the default NetfilterPolicy's spec
  check_helm.py netpol CHART.yaml VALUES.yaml
      a render with VALUES.yaml and webhook.networkPolicy.enabled=true: the
      webhook's NetworkPolicy admits webhook.port from webhookFrom and the metrics
      port from metricsFrom, nothing else
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

def string_difference(a, b):
    """Where two long strings (a dashboard's JSON) part, briefly."""
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    line = a.count("\n", 0, at) + 1
    return (f"{len(a)} and {len(b)} characters, first difference at character {at} (line {line}): "
            f"{a[max(0, at - 20):at + 40]!r} vs {b[max(0, at - 20):at + 40]!r}")


def differences(a, b, path="", names=("manifests/", "chart")):
    """Field paths where a and b differ, with both values (a: manifests/,
    b: the chart, unless `names` says otherwise)."""
    left, right = names
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in b:
                out.append(f"{p}: only in {left} ({a[k]!r})")
            elif k not in a:
                out.append(f"{p}: only in the {right} ({b[k]!r})")
            else:
                out.extend(differences(a[k], b[k], p, names))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items in {left}, {len(b)} in the {right}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out.extend(differences(x, y, f"{path}[{i}]", names))
        return out
    # Typed: "2" (a string) and 2 (a number) are different manifests.
    if type(a) is not type(b) or a != b:
        if isinstance(a, str) and isinstance(b, str) and max(len(a), len(b)) > 200:
            return [f"{path}: {left} and {right} differ: {string_difference(a, b)}"]
        return [f"{path}: {left} {a!r}, {right} {b!r}"]
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


# ---- monitoring: the chart's monitoring equals monitoring/ ------------------

def prometheus_templates(rule):
    """Annotations of a PrometheusRule that hold Prometheus template text."""
    return [a for g in rule["spec"]["groups"] for r in g["rules"]
            for a in r.get("annotations", {}).values() if "{{ $labels." in a]


def check_monitoring(on_path, default_path, kustomize_path):
    on = index(load(on_path), "chart with monitoring")
    default = index(load(default_path), "chart")
    want = index(load(kustomize_path), "monitoring/")
    for k in sorted(set(default) - set(on), key=str):
        fail(f"{ident(k)}: rendered by default, gone with monitoring enabled")
    for k in sorted(set(default) & set(on), key=str):
        for d in differences(default[k], on[k], names=("the default render", "render with monitoring")):
            fail(f"{ident(k)}: {d}")
    added = {k: on[k] for k in set(on) - set(default)}
    for k in sorted(set(want) - set(added), key=str):
        fail(f"{ident(k)}: in `kustomize build monitoring/`, not rendered by the chart")
    for k in sorted(set(added) - set(want), key=str):
        fail(f"{ident(k)}: rendered by the chart with monitoring enabled, not in monitoring/")
    for k in sorted(set(added) & set(want), key=str):
        for d in differences(want[k], added[k], names=("monitoring/", "chart")):
            fail(f"{ident(k)}: {d}")
    # Equal to kustomize's, and the rules' Prometheus templates survived Helm.
    rule_key = ("PrometheusRule", "nfguard-system", "nfguard")
    if rule_key in added and rule_key in want:
        got, expected = prometheus_templates(added[rule_key]), prometheus_templates(want[rule_key])
        if not expected or got != expected:
            fail(f"{ident(rule_key)}: the annotations holding {{{{ $labels.* }}}} differ ({len(got)} in the "
                 f"chart, {len(expected)} in monitoring/): Helm must pass the rules' text through unevaluated")
        else:
            print(f"check_helm: {len(got)} rule annotations keep their {{{{ $labels.* }}}} text verbatim")
    print(f"check_helm: {len(set(added) & set(want))} monitoring objects compared with monitoring/, "
          f"{len(set(default) & set(on))} others unchanged")


# ---- namespace: every reference follows the release namespace --------------

# Bindings whose subject is not nfguard's but another install's (the value's
# default): Prometheus's ServiceAccount, monitoring.podMonitors.prometheusServiceAccount.
FOREIGN_SUBJECTS = {("ClusterRoleBinding", "nfguard-metrics-scraper"): ("prometheus-k8s", "monitoring")}


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
            outside = FOREIGN_SUBJECTS.get((o["kind"], o["metadata"]["name"]))
            for s in o.get("subjects", []):
                if outside and (s.get("name"), s.get("namespace")) == outside:
                    continue
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
    for policy, sa in (("nfguard-reporter-own-node", "nfguard-reporter"),
                       ("nfguard-controller-node-writes", "nfguard-controller"),
                       ("nfguard-controller-report-writes", "nfguard-controller"),
                       ("nfguard-controller-profile-writes", "nfguard-controller"),
                       ("nfguard-webhook-ca-bundle", "nfguard-webhook")):
        vap = by_key.get(("ValidatingAdmissionPolicy", None, policy))
        if not vap:
            fail(f"ValidatingAdmissionPolicy {policy}: not rendered")
            continue
        want = f"'system:serviceaccount:{ns}:{sa}'"
        exprs = [c["expression"] for c in vap["spec"].get("matchConditions", [])]
        if not any(want in e for e in exprs):
            fail(f"ValidatingAdmissionPolicy {policy}: spec.matchConditions do not name {want}: {exprs}")
    check_pod_monitors(by_key, objs, ns)
    for k in (("PrometheusRule", ns, "nfguard"), ("ConfigMap", ns, "nfguard-grafana-dashboard")):
        if k not in by_key:
            fail(f"{ident(k)}: not rendered (render with monitoring enabled)")
    if ns != "nfguard-system":
        text = yaml.safe_dump_all(objs)
        if "nfguard-system" in text:
            lines = [line.strip() for line in text.splitlines() if "nfguard-system" in line]
            fail(f"the default namespace nfguard-system is still spelled in a render for {ns}: {lines[:5]}")
    print(f"check_helm: {len(objs)} objects follow the release namespace {ns}")


def check_pod_monitors(by_key, objs, ns):
    """One PodMonitor per component in NS, each selecting exactly its
    component's pods there, on a port those pods name."""
    monitors = {o["metadata"]["name"]: o for o in objs if o["kind"] == "PodMonitor"}
    expect("PodMonitors", sorted(monitors), sorted(f"nfguard-{c}" for c in COMPONENTS))
    for name, m in sorted(monitors.items()):
        spec = m["spec"]
        where = spec.get("namespaceSelector")
        if where not in (None, {}, {"matchNames": [ns]}):
            fail(f"PodMonitor {ns}/{name}: namespaceSelector {where}, not the release namespace {ns}")
        selector = spec["selector"]
        if set(selector) != {"matchLabels"}:
            fail(f"PodMonitor {ns}/{name}: selector {selector} (only matchLabels is checked here)")
        wanted = selector.get("matchLabels", {})
        selected = [c for c in COMPONENTS if workload(by_key, c, ns) and all(
            workload(by_key, c, ns)["spec"]["template"]["metadata"]["labels"].get(k) == v
            for k, v in wanted.items())]
        expect(f"PodMonitor {ns}/{name} selects the pods of", selected, [name.removeprefix("nfguard-")])
        for c in selected:
            ports = {p.get("name") for p in container(by_key, c, ns).get("ports", [])}
            for e in spec["podMetricsEndpoints"]:
                if e.get("port") not in ports:
                    fail(f"PodMonitor {ns}/{name}: port {e.get('port')!r} is not a port of the {c} container {sorted(ports)}")


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
                  "podMonitors.labels", "prometheusRule.labels", "grafanaDashboard.labels",
                  "namespaceSelector.matchLabels", "defaultPolicy.spec")


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
        # The webhook's own port: with hostNetwork it shares nodes with the reporter.
        port = values["webhook"]["metricsPort"] if c == "webhook" else values["metrics"]["port"]
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
            want = comp[field]
            if c == "reporter" and field == "tolerations" and comp["controlPlaneNodes"]:
                want = want + [CONTROL_PLANE_TOLERATION]
            expect(f"{c} {field}", p.get(field), want)
            checked.add(f"{c}.{field}")
        for e in comp["extraEnv"]:
            expect(f"{c} env {e['name']}", env_value(cont, e["name"]), e["value"])
        checked |= {f"{c}.resources", f"{c}.extraEnv"}
    checked |= {"image.repository", "image.tag", "image.pullPolicy",
                "imagePullSecrets", "log.level", "log.format", "metrics.port"}

    # The registry egress policy: the webhook's and the controller's only.
    for field, env in (("allowCidrs", "NFGUARD_REGISTRY_ALLOW_CIDRS"),
                       ("denyCidrs", "NFGUARD_REGISTRY_DENY_CIDRS"),
                       ("allowHosts", "NFGUARD_REGISTRY_ALLOW_HOSTS"),
                       ("denyHosts", "NFGUARD_REGISTRY_DENY_HOSTS")):
        def egress(v, env=env):
            for c in ("controller", "webhook"):
                expect(f"{c} env {env}", env_value(container(by_key, c, ns), env), ",".join(v))
            expect(f"reporter env {env}", env_value(container(by_key, "reporter", ns), env), None)
        check(f"registryEgress.{field}", egress)

    # A private registry's CA: mounted into the webhook and the controller
    # and named by --registry-ca's variable; never into the reporter.
    def registry_ca(v):
        for c in ("controller", "webhook"):
            cont, p = container(by_key, c, ns), pod(by_key, c, ns)
            expect(f"{c} env NFGUARD_REGISTRY_CA_FILES", env_value(cont, "NFGUARD_REGISTRY_CA_FILES"),
                   f"/etc/nfguard/registry-ca/{values['registryCA']['key']}")
            vols = [x.get("configMap", {}).get("name") for x in p.get("volumes", []) if x["name"] == "registry-ca"]
            expect(f"{c} volume registry-ca (ConfigMap)", vols, [v])
            mounts = [(m["mountPath"], m.get("readOnly")) for m in cont.get("volumeMounts", [])
                      if m["name"] == "registry-ca"]
            expect(f"{c} mount registry-ca", mounts, [("/etc/nfguard/registry-ca", True)])
        expect("reporter env NFGUARD_REGISTRY_CA_FILES",
               env_value(container(by_key, "reporter", ns), "NFGUARD_REGISTRY_CA_FILES"), None)
    check("registryCA.configMapName", registry_ca)
    checked.add("registryCA.key")  # part of the path checked above

    check_reporter_values(by_key, ns, check)

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

    # Only the API server may call /validate: the CA's ConfigMap mounted, its
    # file and the allowed names passed to the webhook.
    hook_c, hook_p = container(by_key, "webhook", ns), pod(by_key, "webhook", ns)

    def client_ca(v):
        expect("webhook env NFGUARD_CLIENT_CA_FILE", env_value(hook_c, "NFGUARD_CLIENT_CA_FILE"),
               "/etc/nfguard/client-ca/ca.crt")
        vols = [x.get("configMap", {}).get("name") for x in hook_p.get("volumes", []) if x["name"] == "client-ca"]
        expect("webhook volume client-ca (ConfigMap)", vols, [v])
        mounts = [(m["mountPath"], m.get("readOnly")) for m in hook_c.get("volumeMounts", []) if m["name"] == "client-ca"]
        expect("webhook mount client-ca", mounts, [("/etc/nfguard/client-ca", True)])
    check("webhook.clientCA.configMapName", client_ca)

    # The node's network or the pod's, and the ports /validate and /metrics use.
    hook_d = workload(by_key, "webhook", ns)

    def host_network(v):
        expect("webhook hostNetwork", hook_p.get("hostNetwork", False), v)
        expect("webhook dnsPolicy", hook_p.get("dnsPolicy"), "Default" if v else None)
        expect("webhook rollingUpdate", hook_d["spec"]["strategy"]["rollingUpdate"],
               {"maxUnavailable": 1, "maxSurge": 0} if v else {"maxUnavailable": 0, "maxSurge": 1})
    check("webhook.hostNetwork", host_network)

    def https_port(v):
        args = hook_c["args"]
        expect("webhook --listen", args[args.index("--listen") + 1], f"0.0.0.0:{v}")
        expect("webhook https containerPort",
               [p["containerPort"] for p in hook_c["ports"] if p["name"] == "https"], [v])
        svc = by_key[("Service", ns, "nfguard-webhook")]
        expect("webhook Service targetPort", [p["targetPort"] for p in svc["spec"]["ports"]], ["https"])
    check("webhook.port", https_port)
    checked.add("webhook.metricsPort")  # with the other components' metrics ports above
    check("webhook.clientCA.allowedNames",
          lambda v: expect("webhook env NFGUARD_CLIENT_CERT_NAMES", env_value(hook_c, "NFGUARD_CLIENT_CERT_NAMES"), ",".join(v)))
    netpol = by_key.get(("NetworkPolicy", ns, "nfguard-webhook"))
    check("webhook.networkPolicy.enabled",
          lambda v: expect("NetworkPolicy nfguard-webhook rendered", netpol is not None, v))
    # The peers need the policy enabled, which these values turn off: the
    # `netpol` command checks them on a second render.
    checked.update({"webhook.networkPolicy.webhookFrom", "webhook.networkPolicy.metricsFrom"})

    digests = by_key.get(("ValidatingAdmissionPolicyBinding", None, "nfguard-require-image-digests"))
    check("requireImageDigests.enabled",
          lambda v: expect("ValidatingAdmissionPolicy nfguard-require-image-digests rendered",
                           digests is not None
                           and ("ValidatingAdmissionPolicy", None, "nfguard-require-image-digests") in by_key, v))
    check("requireImageDigests.validationActions",
          lambda v: expect("nfguard-require-image-digests validationActions",
                           (digests or {}).get("spec", {}).get("validationActions"), v))
    digests_vap = by_key.get(("ValidatingAdmissionPolicy", None, "nfguard-require-image-digests"), {})
    expect("nfguard-require-image-digests leaves the release namespace out",
           digests_vap.get("spec", {}).get("matchConstraints", {}).get("namespaceSelector", {}).get("matchExpressions"),
           [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [ns]}])

    policy = by_key.get(("NetfilterPolicy", None, "default"))
    check("defaultPolicy.enabled",
          lambda v: expect("NetfilterPolicy default rendered", policy is not None, v))
    # Its effect needs the policy enabled, which these values turn off: the
    # `policy` command checks it on a second render.
    checked.add("defaultPolicy.spec")

    check_monitoring_values(by_key, objs, ns, values, check)

    # Every value set here has a check.
    for path in sorted(set(leaves(values)) - checked):
        fail(f"check_helm.py: no check for the value {path}")
    print(f"check_helm: {len(checked)} values checked in a render of {len(objs)} objects")


CONTROL_PLANE_TOLERATION = {"key": "node-role.kubernetes.io/control-plane",
                            "operator": "Exists", "effect": "NoSchedule"}


def check_reporter_values(by_key, ns, check):
    """Control-plane opt-in (the toleration is checked with the others),
    host paths (read-only, recursively where possible, never created) and
    the health port."""
    cont, spec = container(by_key, "reporter", ns), pod(by_key, "reporter", ns)
    check("reporter.controlPlaneNodes",
          lambda v: expect("reporter tolerates control-plane nodes",
                           CONTROL_PLANE_TOLERATION in spec.get("tolerations", []), v))

    def host_paths(paths):
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = [m for m in cont.get("volumeMounts", []) if m["mountPath"].startswith("/host")]
        expect("reporter host mounts", [m["mountPath"] for m in mounts], ["/host" + p for p in paths])
        expect("reporter host volumes", [vols.get(m["name"], {}).get("hostPath") for m in mounts],
               [{"path": p, "type": "Directory"} for p in paths])
        expect("reporter host mounts read-only",
               {(m.get("readOnly"), m.get("recursiveReadOnly")) for m in mounts}, {(True, "IfPossible")})
    check("reporter.hostPaths", host_paths)

    def health(port):
        args = cont.get("args", [])
        listen = args[args.index("--health-listen") + 1] if "--health-listen" in args else None
        expect("reporter --health-listen", listen, f"0.0.0.0:{port}")
        expect("reporter health containerPort",
               [p["containerPort"] for p in cont.get("ports", []) if p["name"] == "health"], [port])
    check("reporter.healthPort", health)


def has_labels(obj, want):
    """obj's labels include want's non-null ones and none of its null ones
    (Helm drops a default label set to null)."""
    labels = obj["metadata"].get("labels", {})
    return all(labels.get(k) == v if v is not None else k not in labels for k, v in want.items())


def check_monitoring_values(by_key, objs, ns, values, check):
    monitors = [by_key.get(("PodMonitor", ns, f"nfguard-{c}")) for c in COMPONENTS]
    monitors = [m for m in monitors if m]
    check("monitoring.podMonitors.enabled",
          lambda v: expect("PodMonitors rendered", len(monitors), 3 if v else 0))
    check("monitoring.podMonitors.interval",
          lambda v: expect("PodMonitor intervals", [e.get("interval") for m in monitors
                                                    for e in m["spec"]["podMetricsEndpoints"]], [v] * 3))
    check("monitoring.podMonitors.labels",
          lambda v: expect("PodMonitors labelled with monitoring.podMonitors.labels",
                           [has_labels(m, v) for m in monitors], [True] * 3))
    reporter_monitor = by_key.get(("PodMonitor", ns, "nfguard-reporter"))
    check("monitoring.podMonitors.reporterScrapeClass",
          lambda v: expect("the reporter PodMonitor's scrapeClass",
                           reporter_monitor and reporter_monitor["spec"].get("scrapeClass"), v))
    binding = by_key.get(("ClusterRoleBinding", None, "nfguard-metrics-scraper"))
    subject = (binding or {}).get("subjects", [{}])[0]
    check("monitoring.podMonitors.prometheusServiceAccount.name",
          lambda v: expect("nfguard-metrics-scraper's subject", subject.get("name"), v))
    check("monitoring.podMonitors.prometheusServiceAccount.namespace",
          lambda v: expect("nfguard-metrics-scraper's subject namespace", subject.get("namespace"), v))
    if monitors:
        check_pod_monitors(by_key, objs, ns)

    rule = by_key.get(("PrometheusRule", ns, "nfguard"))
    check("monitoring.prometheusRule.enabled",
          lambda v: expect("PrometheusRule rendered", rule is not None, v))
    check("monitoring.prometheusRule.labels",
          lambda v: expect("PrometheusRule labelled with monitoring.prometheusRule.labels",
                           rule is not None and has_labels(rule, v), True))

    dashboards = [o for o in objs if (o["kind"], o["metadata"]["name"]) == ("ConfigMap", "nfguard-grafana-dashboard")]
    check("monitoring.grafanaDashboard.enabled",
          lambda v: expect("dashboard ConfigMaps rendered", len(dashboards), 1 if v else 0))
    check("monitoring.grafanaDashboard.namespace",
          lambda v: expect("dashboard ConfigMap namespace", [d["metadata"].get("namespace") for d in dashboards], [v]))
    check("monitoring.grafanaDashboard.labels",
          lambda v: expect("dashboard ConfigMap labelled with monitoring.grafanaDashboard.labels",
                           [has_labels(d, v) for d in dashboards], [True]))


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


def check_network_policy(chart_path, values_path):
    """A render with VALUES.yaml and webhook.networkPolicy.enabled=true: the
    NetworkPolicy nfguard-webhook selects the webhook's pods and admits only
    webhook.port from webhookFrom and webhook.metricsPort from metricsFrom."""
    with open(values_path, encoding="utf-8") as f:
        values = yaml.safe_load(f)
    np, port = values["webhook"]["networkPolicy"], values["webhook"]["metricsPort"]
    pols = [o for o in load(chart_path) if o["kind"] == "NetworkPolicy"]
    if [p["metadata"]["name"] for p in pols] != ["nfguard-webhook"]:
        fail(f"expected exactly the NetworkPolicy nfguard-webhook, found {[p['metadata']['name'] for p in pols]}")
        return
    spec = pols[0]["spec"]
    expect("NetworkPolicy nfguard-webhook podSelector", spec["podSelector"],
           {"matchLabels": {"app.kubernetes.io/name": "nfguard", "app.kubernetes.io/component": "webhook"}})
    expect("NetworkPolicy nfguard-webhook policyTypes", spec["policyTypes"], ["Ingress"])
    expect("NetworkPolicy nfguard-webhook ingress", spec["ingress"], [
        {"ports": [{"protocol": "TCP", "port": values["webhook"]["port"]}], "from": np["webhookFrom"]},
        {"ports": [{"protocol": "TCP", "port": port}], "from": np["metricsFrom"]},
    ])
    print("check_helm: the webhook's NetworkPolicy carries webhook.networkPolicy.*")


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
    commands = {"same": (check_same, 2), "monitoring": (check_monitoring, 3),
                "namespace": (check_namespace, 2),
                "values": (check_values, 3), "policy": (check_policy, 2),
                "netpol": (check_network_policy, 2),
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
