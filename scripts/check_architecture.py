#!/usr/bin/env python3
"""The shape docs/architecture.md describes, checked (tests/it/architecture.rs):

- no import circle between the crate's modules (files): each `use` and path
  of `crate::`, `super::` and `self::` outside `#[cfg(test)]` blocks is an
  arrow; a module may always reach its own ancestors and descendants;
- the controller's rooms call only the rooms below them (the order in
  src/controller/mod.rs's doc);
- no folder of the controller holds more than 10 files.

Prints each problem and exits 1, else one summary line.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
# Lowest first: a room may use the rooms before it, never those after it.
CONTROLLER_ROOMS = ["timing", "plan", "cache", "metrics", "apply", "reports", "lease", "run", "http", "cli"]
MAX_FILES = 10
IDENT = re.compile(r"\b(crate|super(?:::super)*|self)::((?:[a-z_][a-z0-9_]*::)*)(\{|[A-Za-z_][A-Za-z0-9_]*)?")


def modules():
    mods = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            mods[tuple(rel)] = path
    return mods


def code_of(path):
    text = open(path, encoding="utf-8").read()
    m = re.search(r"#\[cfg\(test\)\]\s*\n\s*(pub(\([a-z]+\))? )?mod \w+\s*\{", text)
    if m:
        text = text[: m.start()]
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def target(mods, path):
    for k in range(len(path), -1, -1):
        if tuple(path[:k]) in mods:
            return tuple(path[:k])
    return ()


def group(text, start):
    """The paths of a `{...}` use group opening at `start`, nested groups
    flattened (`{a::{B, C}, d}` -> a::B, a::C, d)."""
    paths, stack, item, i = [], [[]], "", start + 1
    while i < len(text) and stack:
        c = text[i]
        if c == "{":
            stack.append(stack[-1] + [p for p in item.strip().split("::") if p])
            item = ""
        elif c in ",}":
            name = item.strip().split(" as ")[0]
            if name:
                paths.append(stack[-1] + [p for p in name.split("::") if p])
            item = ""
            if c == "}":
                stack.pop()
        else:
            item += c
        i += 1
    return paths


def edges(mods):
    out = {m: set() for m in mods}
    for mod, path in mods.items():
        code = code_of(path)
        for m in IDENT.finditer(code):
            head, mid, last = m.group(1), m.group(2), m.group(3) or ""
            if head == "crate":
                base = []
            elif head == "self":
                base = list(mod)
            else:
                base = list(mod[: len(mod) - head.count("super")])
            prefix = base + [p for p in mid.split("::") if p]
            names = group(code, m.end() - 1) if last == "{" else [[last]]
            for name in names:
                t = target(mods, prefix + name)
                related = t == mod or mod[: len(t)] == t or t[: len(mod)] == mod
                if t and not related:
                    out[mod].add(t)
    return out


def cycles(graph):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main():
    mods = modules()
    graph = edges(mods)
    problems = []
    for comp in cycles(graph):
        names = ", ".join("::".join(c) for c in comp)
        arrows = [f"{'::'.join(a)} -> {'::'.join(b)}" for a in comp for b in sorted(graph[a]) if b in comp]
        problems.append(f"import circle between {names}: " + "; ".join(arrows))
    rank = {room: i for i, room in enumerate(CONTROLLER_ROOMS)}
    for mod, targets in sorted(graph.items()):
        if len(mod) < 2 or mod[0] != "controller" or mod[1] not in rank:
            continue
        for t in sorted(targets):
            if len(t) >= 2 and t[0] == "controller" and t[1] in rank and rank[t[1]] > rank[mod[1]]:
                problems.append(f"controller room {mod[1]} calls {t[1]}, a room above it: {'::'.join(mod)} -> {'::'.join(t)}")
    rooms = [r for r in os.listdir(os.path.join(ROOT, "controller")) if not r.endswith(".rs")]
    missing = sorted(set(rooms) - set(CONTROLLER_ROOMS))
    if missing:
        problems.append(f"controller rooms without a place in CONTROLLER_ROOMS: {missing}")
    for dirpath, _, files in os.walk(os.path.join(ROOT, "controller")):
        n = len([f for f in files if f.endswith(".rs")])
        if n > MAX_FILES:
            problems.append(f"{os.path.relpath(dirpath, ROOT)} holds {n} files (at most {MAX_FILES})")
    for p in problems:
        print("check_architecture:", p)
    if problems:
        return 1
    print(f"check_architecture: {len(mods)} modules, {sum(map(len, graph.values()))} arrows, no circle; controller rooms in order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
