#!/usr/bin/env python3
"""A minimal kustomize renderer for machines without kubectl or kustomize.

Supports exactly what manifests/ uses: `resources` (YAML files and
directories holding a kustomization.yaml), `images` (newName, newTag,
digest) and `sortOptions` of order `legacy` (the output is ordered by kind as
kustomize orders it, so `kubectl delete -f` of it deletes in that order). Any other kustomization field is an error, so this fallback can
never silently render something different from `kubectl kustomize`;
scripts/check-install.sh compares both whenever kubectl is present.

Usage: kustomize_render.py DIR  (prints the multi-document YAML stream)
"""
import os
import sys

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "images", "sortOptions"}
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


class RenderError(Exception):
    pass


def load_kustomization(directory):
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                k = yaml.safe_load(f) or {}
            unsupported = sorted(set(k) - SUPPORTED)
            if unsupported:
                raise RenderError(f"{path}: unsupported fields {unsupported}")
            return k
    raise RenderError(f"{directory}: no kustomization.yaml")


def split_image(ref):
    """'repo/name:tag' -> ('repo/name', ':tag'); keeps '@sha256:..' digests."""
    if "@" in ref:
        name, digest = ref.split("@", 1)
        return name, "@" + digest
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon:]
    return ref, ""


def set_images(node, images):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CONTAINER_LISTS and isinstance(value, list):
                for c in value:
                    if isinstance(c, dict) and isinstance(c.get("image"), str):
                        c["image"] = rewrite_image(c["image"], images)
            set_images(value, images)
    elif isinstance(node, list):
        for item in node:
            set_images(item, images)


def rewrite_image(ref, images):
    name, suffix = split_image(ref)
    for rule in images:
        if rule.get("name") != name:
            continue
        new_name = rule.get("newName", name)
        if "digest" in rule:
            suffix = "@" + rule["digest"]
        elif "newTag" in rule:
            suffix = ":" + str(rule["newTag"])
        return new_name + suffix
    return ref


def render(directory, depth=0):
    if depth > 10:
        raise RenderError(f"{directory}: resources nest too deep")
    k = load_kustomization(directory)
    objects = []
    for res in k.get("resources", []):
        path = os.path.normpath(os.path.join(directory, res))
        if os.path.isdir(path):
            objects.extend(render(path, depth + 1))
        elif os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                objects.extend(d for d in yaml.safe_load_all(f) if d)
        else:
            raise RenderError(f"{directory}: resource {res} not found")
    set_images(objects, k.get("images", []))
    return sort_legacy(objects, k.get("sortOptions"), directory)


def sort_legacy(objects, options, directory):
    """kustomize's legacy order: the kinds of orderFirst in that order, other
    kinds, then orderLast; within a place by kind, namespace and name."""
    if options is None:
        return objects
    legacy = options.get("legacySortOptions", {})
    if options.get("order") != "legacy" or set(legacy) - {"orderFirst", "orderLast"}:
        raise RenderError(f"{directory}: only sortOptions of order legacy with orderFirst/orderLast")
    first, last = legacy.get("orderFirst", []), legacy.get("orderLast", [])

    def place(o):
        kind = o.get("kind", "")
        if kind in first:
            return first.index(kind)
        if kind in last:
            return len(first) + 1 + last.index(kind)
        return len(first)

    return sorted(objects, key=lambda o: (place(o), o.get("kind", ""),
                                          o.get("metadata", {}).get("namespace", ""),
                                          o.get("metadata", {}).get("name", "")))


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        objects = render(sys.argv[1])
    except (RenderError, OSError, yaml.YAMLError) as e:
        print(f"kustomize_render: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
