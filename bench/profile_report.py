"""Turn a pyinstrument session into the reports the benchmarks keep: the
call tree as pyinstrument prints it, and flat tables — self time and
inclusive time per function (file:line of its `def`), the studio's own code
apart, and time under a few libraries of interest.
"""

from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = {
    "psycopg (PostgreSQL driver, incl. waiting for the server)": "/psycopg/",
    "django/db (ORM: building queries, reading rows)": "/django/db/",
    "django (other)": "/django/",
    "rest_framework": "/rest_framework/",
    "openai SDK": "/openai/",
    "httpx / httpcore": "/httpx",
    "ssl (creating SSL contexts)": "/ssl.py",
    "tiktoken (token counts)": "/tiktoken/",
    "asgiref (sync/async bridges)": "/asgiref/",
    "channels / channels_redis": "/channels",
    "daphne / twisted": "/twisted/",
    "threading (thread start and waits)": "/threading.py",
    "json": "/json/",
}


def _key(frame) -> tuple:
    return (frame.function or "?", frame.file_path or "", frame.line_no or 0)


def _where(key: tuple) -> str:
    function, file_path, line = key
    path = file_path
    if path.startswith(str(REPO_ROOT) + "/"):
        path = path[len(str(REPO_ROOT)) + 1 :]
    if "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif "/lib/python3" in path:
        path = "stdlib/" + path.split("/lib/python3", 1)[1].split("/", 1)[-1]
    return f"{path}:{line} {function}" if path else function


def _is_studio(key: tuple) -> bool:
    path = key[1]
    return path.startswith(str(REPO_ROOT) + "/") and "/.venv/" not in path and "/bench/" not in path


def flat(session) -> dict:
    root = session.root_frame()
    total = root.time if root else 0.0
    inclusive: dict = defaultdict(float)
    self_time: dict = defaultdict(float)
    libraries: dict = defaultdict(float)

    def walk(frame, on_path: frozenset):
        key = _key(frame)
        if frame.is_synthetic_leaf:
            # "[self]", "[await]" …: time spent in the parent itself.
            parent = frame.parent
            if parent is not None:
                self_time[_key(parent)] += frame.time
            return
        if key not in on_path:
            inclusive[key] += frame.time
        children = frame.children
        if not children:
            self_time[key] += frame.time
        else:
            leftover = frame.time - sum(c.time for c in children)
            if leftover > 0:
                self_time[key] += leftover
        for child in children:
            walk(child, on_path | {key})

    if root is not None:
        walk(root, frozenset())
    for key, seconds in self_time.items():
        for name, marker in LIBRARIES.items():
            if marker in key[1]:
                libraries[name] += seconds
                break  # the first (most specific) match only

    def rows(mapping, keep=lambda k: True, limit=30):
        ordered = sorted(((t, k) for k, t in mapping.items() if keep(k)), reverse=True)[:limit]
        return [
            {"where": _where(k), "seconds": round(t, 4), "share": round(t / total, 4) if total else 0}
            for t, k in ordered
        ]

    return {
        "totalSeconds": round(total, 4),
        "selfTime": rows(self_time),
        "studioInclusive": rows(inclusive, _is_studio, limit=40),
        "libraries": [
            {"library": name, "seconds": round(t, 4), "share": round(t / total, 4) if total else 0}
            for name, t in sorted(libraries.items(), key=lambda item: -item[1])
        ],
    }


def flat_text(summary: dict) -> str:
    total = summary["totalSeconds"] or 1
    out = [f"total sampled wall time: {summary['totalSeconds']:.3f} s", ""]
    out.append("Self time (the function's own code, or a C call it made), top 30:")
    out += [f"  {r['share'] * 100:5.1f}%  {r['seconds']:8.4f} s  {r['where']}" for r in summary["selfTime"]]
    out.append("")
    out.append("Inclusive time of the studio's own functions (agents/, memories/, billing/, studio/):")
    out += [
        f"  {r['share'] * 100:5.1f}%  {r['seconds']:8.4f} s  {r['where']}" for r in summary["studioInclusive"]
    ]
    out.append("")
    out.append("Self time inside a library's own code (C calls it makes included):")
    out += [
        f"  {r['seconds'] / total * 100:5.1f}%  {r['seconds']:8.4f} s  {r['library']}"
        for r in summary["libraries"]
    ]
    return "\n".join(out)


def _skip(frame) -> bool:
    """Frames that only say which thread: merged away."""
    return (frame.file_path or "").startswith("<thread>") or (frame.function or "").startswith("[root]")


def merged_tree(session) -> dict:
    """The call tree with every thread's stacks merged (pyinstrument keeps
    one subtree per thread), keyed by (function, file, def line)."""
    top = {"t": 0.0, "c": {}}

    def add(frame, into):
        for child in frame.children:
            if child.is_synthetic_leaf:
                continue
            if _skip(child):
                add(child, into)
                continue
            node = into["c"].setdefault(_key(child), {"t": 0.0, "c": {}})
            node["t"] += child.time
            add(child, node)

    root = session.root_frame()
    if root is not None:
        top["t"] = root.time
        if _skip(root):
            add(root, top)
        else:
            node = top["c"].setdefault(_key(root), {"t": 0.0, "c": {}})
            node["t"] += root.time
            add(root, node)
    return top


def tree_text(tree: dict, *, min_share: float = 0.01, max_depth: int = 60) -> str:
    """The merged tree, nodes of at least `min_share` of the total; a chain
    of library frames that pass their time on to one child is folded into
    one line."""
    total = tree["t"] or 1.0
    out: list[str] = []

    def emit(key, node, depth, hidden):
        children = sorted(node["c"].items(), key=lambda kv: -kv[1]["t"])
        big = [(k, n) for k, n in children if n["t"] >= min_share * total]
        passes_on = len(big) == 1 and big[0][1]["t"] >= 0.97 * node["t"]
        if not _is_studio(key) and passes_on and not _is_studio(big[0][0]) and depth < max_depth:
            emit(big[0][0], big[0][1], depth, hidden + 1)
            return
        note = f"  [+{hidden} library frames]" if hidden else ""
        out.append(f"{'  ' * depth}{node['t'] / total * 100:5.1f}% {node['t']:8.3f}s  {_where(key)}{note}")
        if depth >= max_depth:
            return
        for k, n in big:
            emit(k, n, depth + 1, 0)

    for key, node in sorted(tree["c"].items(), key=lambda kv: -kv[1]["t"]):
        if node["t"] >= min_share * total:
            emit(key, node, 0, 0)
    return "\n".join(out)


def write(session, path: Path, *, title: str) -> dict:
    """Write the tree and the flat tables to `path` (and the flat tables to
    `path` with .flat.txt); returns the flat summary."""
    summary = flat(session)
    tree = tree_text(merged_tree(session))
    path.parent.mkdir(parents=True, exist_ok=True)
    text = flat_text(summary)
    path.write_text(
        f"{title}\n\n{text}\n\n--- call tree, all threads merged (nodes >= 1% of the total; "
        f"time is wall time, waits included) ---\n{tree}\n"
    )
    path.with_suffix(".flat.txt").write_text(f"{title}\n\n{text}\n")
    summary["title"] = title
    summary["report"] = str(path)
    return summary
