"""How the apps' modules may import one another, read from their source
(imports inside functions included): the model providers import no domain,
and no module imports itself back through others."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("agents", "billing", "memories", "studio")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, by absolute name; for `from a import b`
    both `a` and `a.b` (b may be a module)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def _app_modules() -> dict[str, Path]:
    paths = (p for app in APPS for p in (ROOT / app).rglob("*.py") if "migrations" not in p.parts)
    return {_module_name(path): path for path in paths}


def test_no_model_provider_imports_billing_or_memories():
    providers = sorted((ROOT / "agents" / "providers").glob("*.py"))
    assert providers

    offending = {
        _module_name(path): sorted(
            name for name in imported_modules(path) if name.split(".")[0] in ("billing", "memories")
        )
        for path in providers
    }

    assert {module: names for module, names in offending.items() if names} == {}


def _cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A path of imports from `start` back to itself, if there is one."""
    stack, seen = [(start, [start])], set()
    while stack:
        module, path = stack.pop()
        for imported in sorted(graph[module]):
            if imported == start:
                return [*path, start]
            if imported not in seen:
                seen.add(imported)
                stack.append((imported, [*path, imported]))
    return None


def test_no_module_of_the_apps_imports_itself_back_through_others():
    modules = _app_modules()
    graph = {
        module: {name for name in imported_modules(path) if name in modules and name != module}
        for module, path in modules.items()
    }
    assert "agents.compaction" in graph["agents.tasks"]

    cycles = [cycle for module in sorted(graph) if (cycle := _cycle_from(module, graph))]

    assert cycles == []


# --- layers -------------------------------------------------------------------------------
# Each app's modules in three layers: adapters (what a request, a socket, a
# worker or an operator comes in through), the domain beneath them, and the
# model providers beneath that. Imports go down, never up.
ADAPTER_ROOMS = {"api", "pages", "admin", "consumers", "tasks", "urls", "management", "forms"}
LAYERED_APPS = ("agents", "billing", "memories")


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] not in LAYERED_APPS or len(parts) < 2:
        return None
    if parts[:2] == ["agents", "providers"]:
        return "providers"
    return "adapter" if parts[1] in ADAPTER_ROOMS else "domain"


def test_the_domain_imports_no_adapter_and_the_providers_no_domain():
    modules = _app_modules()
    assert _layer("agents.sending.engine") == "domain" and _layer("agents.api.turns") == "adapter"

    upward = {
        module: sorted(
            name
            for name in imported_modules(path)
            if name in modules
            and (_layer(module), _layer(name))
            in {("domain", "adapter"), ("providers", "adapter"), ("providers", "domain")}
        )
        for module, path in modules.items()
    }

    assert {module: names for module, names in upward.items() if names} == {}
