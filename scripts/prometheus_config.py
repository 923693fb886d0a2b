#!/usr/bin/env python3
"""What the Prometheus Operator would give a Prometheus for nfguard's
monitoring/, for a Prometheus run without the operator (the e2e's live
Prometheus, e2e/lib/monitoring.sh; tests/it/monitoring_live.rs tests this script).

  prometheus_config.py scrape PODMONITORS.yaml --api-server URL --ca-file F
        --token-file F --secrets-dir DIR [--interval D] [--rule-file F]...
      prometheus.yml: one scrape job per PodMonitor endpoint, translated as the
      operator's config generator does (kubernetes_sd pod role in the
      PodMonitor's namespace, keep relabels for its selector and port name,
      the namespace/container/pod/endpoint target labels, the default job
      label, then the PodMonitor's own relabelings). The API server is reached
      with --ca-file and the token in --token-file (Prometheus' own identity);
      a secret reference (authorization.credentials) becomes a credentials
      file DIR/NAMESPACE/SECRET/KEY, which the caller fills from the Secret as
      the operator would; a CA from a ConfigMap (tlsConfig.ca.configMap) the
      file --configmaps-dir/NAMESPACE/CONFIGMAP/KEY. --interval replaces every scrape interval and sets
      the evaluation interval (a test's short cycle).
      A PodMonitor's spec.scrapeClass is looked up in --prometheus F (a
      Prometheus resource, monitoring/prometheus-scrape-class.yaml): its
      authorization.credentialsFile, a path inside Prometheus's pod, must lie
      in a volumeMount of a projected serviceAccountToken, and becomes the
      local file that --pod-file POD_PATH=LOCAL names (the caller writes a
      token for that audience there, as the kubelet would).
  prometheus_config.py token-audience PROMETHEUS.yaml CLASS
      the audience of the projected token that scrape class CLASS uses.
  prometheus_config.py rules PROMETHEUSRULE.yaml [--max-for D]
      a rule file holding the PrometheusRule's spec; --max-for shortens every
      longer `for:` to D (a test's copy; the shipped file is never changed).
  prometheus_config.py panels DASHBOARD.json [--var NAME=VALUE]...
      one JSON object a line, {"panel": TITLE, "expr": EXPR}, for every query
      of every panel, Grafana's template variables substituted
      ($__rate_interval defaults to 1m).

Fields the translation does not know are refused by name, never dropped.
Inputs are bounded (1 MiB, 64 documents, 16 endpoints and 64 relabelings
each).
"""
import argparse
import json
import re
import sys

import yaml

MAX_BYTES = 1 << 20
MAX_DOCS = 64
MAX_ITEMS = 16
MAX_RELABELINGS = 64
DURATION = re.compile(r"^(?:[0-9]+(?:ms|s|m|h|d|w|y))+$")
UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}

# What the operator writes for these PodMonitorSpec / PodMetricsEndpoint
# fields; anything else is refused.
MONITOR_FIELDS = {"selector", "podMetricsEndpoints", "namespaceSelector", "scrapeClass"}
SCRAPE_CLASS_FIELDS = {"name", "authorization"}
ENDPOINT_FIELDS = {"port", "path", "interval", "scrapeTimeout", "scheme", "tlsConfig",
                   "authorization", "relabelings"}
RELABEL_FIELDS = {"sourceLabels": "source_labels", "separator": "separator",
                  "targetLabel": "target_label", "regex": "regex", "modulus": "modulus",
                  "replacement": "replacement", "action": "action"}


class Refused(Exception):
    pass


def read_text(path):
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise Refused(f"{path}: larger than {MAX_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Refused(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None


def read_docs(path):
    try:
        docs = []
        for d in yaml.safe_load_all(read_text(path)):
            if d is not None:
                docs.append(d)
            if len(docs) > MAX_DOCS:
                raise Refused(f"{path}: more than {MAX_DOCS} documents")
    except yaml.YAMLError as e:
        raise Refused(f"{path}: not YAML: {getattr(e, 'problem', None) or 'parse error'}") from None
    return docs


def check_keys(where, obj, allowed):
    if not isinstance(obj, dict):
        raise Refused(f"{where}: not a mapping")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise Refused(f"{where}: {', '.join(unknown)} not supported by this translation")


def duration(where, value):
    if not isinstance(value, str) or not DURATION.match(value):
        raise Refused(f"{where}: {value!r} is not a Prometheus duration")
    return value


def seconds(d):
    return sum(int(n) * UNIT_SECONDS[u] for n, u in re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", d))


def sanitize(label):
    """The operator's sanitizeLabelName: a Kubernetes label key as a Prometheus label name."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def selector_relabelings(where, selector):
    check_keys(where, selector, {"matchLabels", "matchExpressions"})
    out = []
    for k in sorted(selector.get("matchLabels") or {}):
        v = selector["matchLabels"][k]
        out.append({"action": "keep",
                    "source_labels": [f"__meta_kubernetes_pod_label_{sanitize(k)}",
                                      f"__meta_kubernetes_pod_labelpresent_{sanitize(k)}"],
                    "regex": f"({v});true"})
    for i, e in enumerate(selector.get("matchExpressions") or []):
        check_keys(f"{where}.matchExpressions[{i}]", e, {"key", "operator", "values"})
        key, op = sanitize(e["key"]), e["operator"]
        values = "|".join(e.get("values") or [])
        if op in ("In", "NotIn"):
            out.append({"action": "keep" if op == "In" else "drop",
                        "source_labels": [f"__meta_kubernetes_pod_label_{key}",
                                          f"__meta_kubernetes_pod_labelpresent_{key}"],
                        "regex": f"({values});true"})
        elif op in ("Exists", "DoesNotExist"):
            out.append({"action": "keep" if op == "Exists" else "drop",
                        "source_labels": [f"__meta_kubernetes_pod_labelpresent_{key}"],
                        "regex": "true"})
        else:
            raise Refused(f"{where}.matchExpressions[{i}]: operator {op!r} unknown")
    return out


def user_relabelings(where, relabelings):
    if len(relabelings) > MAX_RELABELINGS:
        raise Refused(f"{where}: more than {MAX_RELABELINGS} relabelings")
    out = []
    for i, r in enumerate(relabelings):
        check_keys(f"{where}[{i}]", r, set(RELABEL_FIELDS))
        out.append({RELABEL_FIELDS[k]: v for k, v in r.items()})
    return out


def prometheus_spec(path):
    docs = read_docs(path)
    if len(docs) != 1 or not isinstance(docs[0], dict) or docs[0].get("kind") != "Prometheus":
        raise Refused(f"{path}: not one Prometheus")
    spec = docs[0].get("spec")
    if not isinstance(spec, dict):
        raise Refused(f"{path}: no spec")
    return spec


def class_token(path, name):
    """(credentialsFile, audience) of scrape class NAME in the Prometheus at PATH."""
    spec = prometheus_spec(path)
    classes = [c for c in spec.get("scrapeClasses") or [] if isinstance(c, dict) and c.get("name") == name]
    if len(classes) != 1:
        raise Refused(f"{path}: no scrape class {name!r} (or more than one)")
    cls = classes[0]
    check_keys(f"scrape class {name}", cls, SCRAPE_CLASS_FIELDS)
    auth = cls.get("authorization") or {}
    check_keys(f"scrape class {name}: authorization", auth, {"type", "credentialsFile"})
    if auth.get("type", "Bearer") != "Bearer" or not auth.get("credentialsFile"):
        raise Refused(f"scrape class {name}: authorization needs type Bearer and credentialsFile")
    file = auth["credentialsFile"]
    mounts = [m for m in spec.get("volumeMounts") or []
              if isinstance(m, dict) and file.startswith(str(m.get("mountPath", "")).rstrip("/") + "/")]
    if len(mounts) != 1:
        raise Refused(f"scrape class {name}: credentialsFile {file} is in no one volumeMount")
    rel = file[len(mounts[0]["mountPath"].rstrip("/")) + 1:]
    volumes = [v for v in spec.get("volumes") or [] if isinstance(v, dict) and v.get("name") == mounts[0].get("name")]
    sources = ((volumes[0].get("projected") or {}).get("sources") or []) if len(volumes) == 1 else []
    tokens = [src["serviceAccountToken"] for src in sources
              if isinstance(src, dict) and isinstance(src.get("serviceAccountToken"), dict)
              and src["serviceAccountToken"].get("path") == rel]
    if len(tokens) != 1 or not tokens[0].get("audience"):
        raise Refused(f"scrape class {name}: {file} is no projected serviceAccountToken with an audience")
    return file, tokens[0]["audience"]


def scrape_job(monitor, index, ep, opts):
    meta = monitor.get("metadata") or {}
    ns, name = meta.get("namespace"), meta.get("name")
    if not ns or not name:
        raise Refused("a PodMonitor without metadata.name and metadata.namespace")
    where = f"PodMonitor {ns}/{name}: podMetricsEndpoints[{index}]"
    check_keys(where, ep, ENDPOINT_FIELDS)
    if not ep.get("port"):
        raise Refused(f"{where}: no port name (portNumber and targetPort are not supported)")
    sd = {"role": "pod", "namespaces": {"names": [ns]}, "api_server": opts.api_server,
          "tls_config": {"ca_file": opts.ca_file},
          "authorization": {"type": "Bearer", "credentials_file": opts.token_file}}
    job = {"job_name": f"podMonitor/{ns}/{name}/{index}", "honor_labels": False,
           "kubernetes_sd_configs": [sd]}
    if opts.interval:
        job["scrape_interval"] = opts.interval
    elif "interval" in ep:
        job["scrape_interval"] = duration(f"{where}.interval", ep["interval"])
    if "scrapeTimeout" in ep:
        job["scrape_timeout"] = duration(f"{where}.scrapeTimeout", ep["scrapeTimeout"])
    if opts.interval and seconds(job.get("scrape_timeout", "10s")) > seconds(opts.interval):
        job["scrape_timeout"] = opts.interval
    if "path" in ep:
        job["metrics_path"] = ep["path"]
    if "scheme" in ep:
        if ep["scheme"] not in ("http", "https"):
            raise Refused(f"{where}.scheme: {ep['scheme']!r} is neither http nor https")
        job["scheme"] = ep["scheme"]
    if "tlsConfig" in ep:
        check_keys(f"{where}.tlsConfig", ep["tlsConfig"], {"insecureSkipVerify", "serverName", "ca"})
        tls = {}
        if "ca" in ep["tlsConfig"]:
            ca = ep["tlsConfig"]["ca"]
            check_keys(f"{where}.tlsConfig.ca", ca, {"configMap"})
            ref = ca.get("configMap") or {}
            check_keys(f"{where}.tlsConfig.ca.configMap", ref, {"name", "key"})
            if not ref.get("name") or not ref.get("key"):
                raise Refused(f"{where}.tlsConfig.ca.configMap: needs name and key")
            if not opts.configmaps_dir:
                raise Refused(f"{where}.tlsConfig.ca.configMap needs --configmaps-dir")
            tls["ca_file"] = f"{opts.configmaps_dir}/{ns}/{ref['name']}/{ref['key']}"
        if "insecureSkipVerify" in ep["tlsConfig"]:
            tls["insecure_skip_verify"] = bool(ep["tlsConfig"]["insecureSkipVerify"])
        if "serverName" in ep["tlsConfig"]:
            tls["server_name"] = ep["tlsConfig"]["serverName"]
        job["tls_config"] = tls
    scrape_class = monitor["spec"].get("scrapeClass")
    if scrape_class and "authorization" not in ep:
        # The operator's merge: the endpoint's own authorization wins.
        if not opts.prometheus:
            raise Refused(f"PodMonitor {ns}/{name}: scrapeClass {scrape_class} needs --prometheus")
        file, _ = class_token(opts.prometheus, scrape_class)
        local = dict(m.split("=", 1) for m in opts.pod_file if "=" in m).get(file)
        if not local:
            raise Refused(f"scrape class {scrape_class}: no --pod-file {file}=LOCAL")
        job["authorization"] = {"type": "Bearer", "credentials_file": local}
    if "authorization" in ep:
        auth = ep["authorization"]
        check_keys(f"{where}.authorization", auth, {"type", "credentials"})
        ref = auth.get("credentials") or {}
        check_keys(f"{where}.authorization.credentials", ref, {"name", "key"})
        if not ref.get("name") or not ref.get("key"):
            raise Refused(f"{where}.authorization.credentials: needs name and key")
        job["authorization"] = {"type": auth.get("type", "Bearer"),
                                "credentials_file": f"{opts.secrets_dir}/{ns}/{ref['name']}/{ref['key']}"}
    relabel = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
               {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "(Failed|Succeeded)"}]
    relabel += selector_relabelings(f"PodMonitor {ns}/{name}: selector", monitor["spec"].get("selector") or {})
    relabel.append({"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                    "regex": ep["port"]})
    relabel += [{"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
                {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                {"target_label": "job", "replacement": f"{ns}/{name}"},
                {"target_label": "endpoint", "replacement": ep["port"]}]
    relabel += user_relabelings(f"{where}.relabelings", ep.get("relabelings") or [])
    job["relabel_configs"] = relabel
    return job


def scrape(opts):
    jobs = []
    for doc in read_docs(opts.podmonitors):
        if not isinstance(doc, dict) or doc.get("kind") != "PodMonitor":
            kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
            raise Refused(f"{opts.podmonitors}: a {kind}, not a PodMonitor")
        spec = doc.get("spec") or {}
        name = (doc.get("metadata") or {}).get("name")
        check_keys(f"PodMonitor {name}: spec", spec, MONITOR_FIELDS)
        if "namespaceSelector" in spec:
            raise Refused(f"PodMonitor {name}: spec.namespaceSelector not supported (its own namespace only)")
        endpoints = spec.get("podMetricsEndpoints") or []
        if not endpoints or len(endpoints) > MAX_ITEMS:
            raise Refused(f"PodMonitor {name}: needs 1 to {MAX_ITEMS} podMetricsEndpoints")
        jobs += [scrape_job(doc, i, ep, opts) for i, ep in enumerate(endpoints)]
    if not jobs:
        raise Refused(f"{opts.podmonitors}: no PodMonitor")
    config = {"scrape_configs": jobs}
    if opts.interval:
        config["global"] = {"scrape_interval": opts.interval, "evaluation_interval": opts.interval}
    if opts.rule_file:
        config["rule_files"] = opts.rule_file
    return yaml.safe_dump(config, sort_keys=False)


def token_audience(opts):
    return class_token(opts.prometheus, opts.scrape_class)[1] + "\n"


def rules(opts):
    docs = read_docs(opts.rule)
    if len(docs) != 1 or not isinstance(docs[0], dict) or docs[0].get("kind") != "PrometheusRule":
        raise Refused(f"{opts.rule}: not one PrometheusRule")
    spec = docs[0].get("spec") or {}
    check_keys(f"{opts.rule}: spec", spec, {"groups"})
    shortened = 0
    for g in spec["groups"]:
        for r in g.get("rules") or []:
            if "for" in r and opts.max_for:
                d = duration(f"{r.get('alert')}: for", r["for"])
                if seconds(d) > seconds(opts.max_for):
                    r["for"] = opts.max_for
                    shortened += 1
    if opts.max_for:
        print(f"prometheus_config: {shortened} alert(s) with `for:` shortened to {opts.max_for}", file=sys.stderr)
    return yaml.safe_dump({"groups": spec["groups"]}, sort_keys=False)


def panels(opts):
    try:
        dash = json.loads(read_text(opts.dashboard))
    except json.JSONDecodeError as e:
        raise Refused(f"{opts.dashboard}: not JSON ({e.msg} at {e.lineno}:{e.colno})") from None
    values = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
    for v in opts.var:
        name, sep, value = v.partition("=")
        if not sep or not name:
            raise Refused(f"--var {v!r}: not NAME=VALUE")
        values[name] = value

    def substitute(expr):
        def one(m):
            name = m.group(1) or m.group(2)
            if name not in values:
                raise Refused(f"{expr!r}: template variable ${name} has no value (--var {name}=...)")
            return values[name]
        return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", one, expr)

    def walk(ps, depth=0):
        if depth > 4:
            raise Refused(f"{opts.dashboard}: panels nested deeper than 4")
        for p in ps:
            yield p
            yield from walk(p.get("panels") or [], depth + 1)

    lines = []
    for p in walk(dash.get("panels") or []):
        for t in p.get("targets") or []:
            if "expr" in t:
                lines.append(json.dumps({"panel": p.get("title", ""), "expr": substitute(t["expr"])}))
    return "\n".join(lines) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scrape")
    s.add_argument("podmonitors")
    s.add_argument("--api-server", required=True)
    s.add_argument("--ca-file", required=True)
    s.add_argument("--token-file", required=True)
    s.add_argument("--secrets-dir", required=True)
    s.add_argument("--interval")
    s.add_argument("--rule-file", action="append", default=[])
    s.add_argument("--configmaps-dir")
    s.add_argument("--prometheus")
    s.add_argument("--pod-file", action="append", default=[])
    a = sub.add_parser("token-audience")
    a.add_argument("prometheus")
    a.add_argument("scrape_class")
    r = sub.add_parser("rules")
    r.add_argument("rule")
    r.add_argument("--max-for")
    p = sub.add_parser("panels")
    p.add_argument("dashboard")
    p.add_argument("--var", action="append", default=[])
    opts = ap.parse_args(argv)
    try:
        for name in ("interval", "max_for"):
            if getattr(opts, name, None):
                duration(f"--{name.replace('_', '-')}", getattr(opts, name))
        out = {"scrape": scrape, "rules": rules, "panels": panels,
               "token-audience": token_audience}[opts.cmd](opts)
    except Refused as e:
        print(f"prometheus_config: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"prometheus_config: {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
