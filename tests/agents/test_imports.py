"""How the apps' modules may import one another, read from their source
(imports inside functions included): the model providers import no domain,
studio's platform rooms import no app (but its models), and no module
imports itself back through others."""

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
    assert "studio.ops.metrics" in graph["studio.live.events"]  # the rooms are in it

    cycles = [cycle for module in sorted(graph) if (cycle := _cycle_from(module, graph))]

    assert cycles == []


# --- layers -------------------------------------------------------------------------------
# Each app's modules in three layers: adapters (what a request, a socket, a
# worker or an operator comes in through), the domain beneath them, and the
# model providers beneath that. Imports go down, never up. Beneath them all,
# studio's platform: its rooms and the few one-file modules every layer uses.
ADAPTER_ROOMS = {"api", "pages", "admin", "consumers", "tasks", "urls", "management", "forms", "templatetags"}
LAYERED_APPS = ("agents", "billing", "memories")
# studio/: what requests, sockets and processes come in through; studio's own
# writes (a new game and its account); the platform, with the rows every app
# hangs from (games, keys, roles). Settings, the .env file, the Celery and
# Django app configs are configuration, in no layer.
STUDIO_ADAPTERS = {"admin", "api", "urls", "routing", "views", "pages", "management", "asgi", "wsgi"}
STUDIO_DOMAIN = {"services"}
PLATFORM = {"live", "auth", "serving", "ops", "runtime", "http", "errors", "tokens", "text", "models"}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None
    if parts[0] == "studio":
        if parts[1] in STUDIO_ADAPTERS:
            return "adapter"
        if parts[1] in STUDIO_DOMAIN:
            return "domain"
        return "platform" if parts[1] in PLATFORM else None
    if parts[0] not in LAYERED_APPS:
        return None
    if parts[:2] == ["agents", "providers"]:
        return "providers"
    return "adapter" if parts[1] in ADAPTER_ROOMS else "domain"


def _imports_across(forbidden) -> dict[str, list[str]]:
    """Each module's imports of the apps' modules for which `forbidden(its
    layer, theirs, their name)` holds; only the modules that have some."""
    modules = _app_modules()
    across = {
        module: sorted(
            name
            for name in imported_modules(path)
            if name in modules and forbidden(_layer(module), _layer(name), name)
        )
        for module, path in modules.items()
    }
    return {module: names for module, names in across.items() if names}


def test_the_domain_imports_no_adapter_and_the_providers_no_domain():
    assert _layer("agents.sending.engine") == "domain" and _layer("agents.api.turns") == "adapter"
    assert _layer("studio.pages.shell") == "adapter" and _layer("studio.services") == "domain"
    upward = {("domain", "adapter"), ("providers", "adapter"), ("providers", "domain")}

    assert _imports_across(lambda layer, theirs, name: (layer, theirs) in upward) == {}


def test_the_platform_imports_no_app_but_its_models():
    """studio's rooms are beneath every app: they know no send, no store, no
    ledger, no page. They may read rows (the metrics count turns and
    balances), so an app's models are theirs to import; nothing else is."""
    assert _layer("studio.live.events") == "platform" and _layer("studio.errors") == "platform"
    assert _layer("studio.settings") is None

    def forbidden(layer, theirs, name):
        if layer != "platform" or theirs in ("platform", None):
            return False
        return not name.endswith(".models")

    assert _imports_across(forbidden) == {}
