#!/usr/bin/env python3
"""What listing every pod costs the API server, by the way it is asked.

Run against a kept bench cluster (`KEEP_CLUSTER=1 scripts/bench-cluster.sh
5000 20`, as root, holding /tmp/nfguard-cluster.lock): for each way of
listing all pods (paged JSON as kube-rs asks, larger pages, one page,
resourceVersion=0, a streaming list, one protobuf page) it reads the API
server's own CPU time (/proc/PID/stat, utime + stime) before and after,
the ways in rotating order, and prints the median, range and bytes.
docs/benchmarks.md, "What listing 100,000 pods costs the API server".

    scripts/bench-pod-list.py [ROUNDS]
"""
import base64
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

KUBECONFIG = os.environ.get("KUBECONFIG", "/var/lib/nfguard-e2e/admin.kubeconfig")


def tls_context(kc):
    user, cluster = kc["users"][0]["user"], kc["clusters"][0]["cluster"]
    d = tempfile.mkdtemp()
    paths = {}
    for key, src in (("client-certificate-data", user), ("client-key-data", user),
                     ("certificate-authority-data", cluster)):
        paths[key] = os.path.join(d, key)
        with open(paths[key], "wb") as f:
            f.write(base64.b64decode(src[key]))
    ctx = ssl.create_default_context(cafile=paths["certificate-authority-data"])
    ctx.load_cert_chain(paths["client-certificate-data"], paths["client-key-data"])
    return ctx


kc = yaml.safe_load(open(KUBECONFIG))
CTX = tls_context(kc)
BASE = kc["clusters"][0]["cluster"]["server"]
APISERVER = subprocess.run(["pgrep", "-f", "kube-apiserver --etcd"], capture_output=True,
                           text=True, check=True).stdout.split()[0]
TICK = os.sysconf("SC_CLK_TCK")


def apiserver_cpu_ms():
    fields = open(f"/proc/{APISERVER}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICK


def get(query, accept="application/json"):
    req = urllib.request.Request(f"{BASE}/api/v1/pods?{urllib.parse.urlencode(query)}",
                                 headers={"Accept": accept})
    return urllib.request.urlopen(req, context=CTX, timeout=600)


def paged(limit, extra=None):
    """Pages of `limit` followed by their continue tokens: (bytes, pages)."""
    def run():
        cont, size, pages = "", 0, 0
        while True:
            q = {"limit": limit, **(extra or {})}
            if cont:
                q["continue"] = cont
            body = get(q).read()
            size, pages = size + len(body), pages + 1
            cont = json.loads(body)["metadata"].get("continue")
            if not cont:
                return size, pages
    return run


def one_page(accept):
    def run():
        return len(get({}, accept).read()), 1
    return run


def streaming():
    """A watch with sendInitialEvents, read to its initial-events-end bookmark."""
    r = get({"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
             "allowWatchBookmarks": "true", "timeoutSeconds": "600"})
    size = 0
    for line in r:
        size += len(line)
        e = json.loads(line)
        if e["type"] == "ERROR":
            sys.exit(f"streaming list refused: {e['object'].get('reason')}")
        annotations = e["object"]["metadata"].get("annotations") or {}
        if e["type"] == "BOOKMARK" and annotations.get("k8s.io/initial-events-end") == "true":
            r.close()
            return size, 1
    sys.exit("the watch ended before its initial-events-end bookmark")


WAYS = [
    ("JSON, pages of 500 (kube-rs)", paged("500")),
    ("JSON, pages of 2000", paged("2000")),
    ("JSON, pages of 5000", paged("5000")),
    ("JSON, one page", one_page("application/json")),
    ("JSON, resourceVersion=0", paged("500", {"resourceVersion": "0", "resourceVersionMatch": "NotOlderThan"})),
    ("streaming list, JSON", streaming),
    ("protobuf, one page", one_page("application/vnd.kubernetes.protobuf")),
]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    runs = {name: [] for name, _ in WAYS}
    for r in range(rounds):
        k = r % len(WAYS)
        for name, way in WAYS[k:] + WAYS[:k]:
            before = apiserver_cpu_ms()
            size, pages = way()
            runs[name].append((apiserver_cpu_ms() - before, size, pages))
            time.sleep(2)
    for name, v in runs.items():
        cpu = sorted(x[0] for x in v)
        print(f"{name:30} API server CPU median {cpu[len(cpu) // 2]:7.0f} ms "
              f"(range {cpu[0]:.0f}-{cpu[-1]:.0f}, {len(cpu)} runs), {v[0][1] / 1e6:.1f} MB in {v[0][2]} pages")


if __name__ == "__main__":
    main()
