"""requirements.txt alone runs the studio: every package its code imports
(or its settings name) is installed by it, not only by requirements-dev.txt."""

import ast
import sys
from importlib.metadata import PackageNotFoundError, packages_distributions, requires

from django.conf import settings
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.sources import ROOT, source_files


def requirement_lines(filename: str) -> list[str]:
    lines = (line.split("#")[0].strip() for line in (ROOT / filename).read_text().splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def installed_by(filename: str) -> set[str]:
    """The distributions installing `filename` brings in: its lines and
    what they require in turn (with the extras asked for)."""
    pending = [Requirement(line) for line in requirement_lines(filename)]
    installed, seen = set(), set()
    while pending:
        requirement = pending.pop()
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        installed.add(key[0])
        try:
            dependencies = [Requirement(text) for text in requires(requirement.name) or ()]
        except PackageNotFoundError:
            continue  # not for this platform
        extras = requirement.extras or {""}
        pending += [
            dependency
            for dependency in dependencies
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": e}) for e in extras)
        ]
    return installed


def imported_modules() -> dict[str, str]:
    """Top-level modules the studio's code imports -> a file importing it."""
    modules = {}
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                modules.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return modules


def modules_named_in_settings() -> set[str]:
    dotted = [*settings.INSTALLED_APPS, *settings.MIDDLEWARE]
    dotted += [storage["BACKEND"] for storage in settings.STORAGES.values()]
    dotted += [layer["BACKEND"] for layer in settings.CHANNEL_LAYERS.values()]
    return {name.split(".")[0] for name in dotted}


def test_requirements_txt_installs_every_package_the_studio_imports():
    ours = {path.name for path in ROOT.iterdir() if (path / "__init__.py").exists()} | {"manage"}
    ours |= {path.name for path in (ROOT / "scripts").iterdir() if (path / "__init__.py").exists()}
    used = {**{name: "studio/settings.py" for name in modules_named_in_settings()}, **imported_modules()}
    third_party = {
        name: where
        for name, where in used.items()
        if name not in ours and name not in sys.stdlib_module_names
    }
    distributions = packages_distributions()
    installed = installed_by("requirements.txt")

    missing = sorted(
        f"{name} ({where})"
        for name, where in third_party.items()
        if not {canonicalize_name(d) for d in distributions.get(name, ())} & installed
    )
    assert not missing, (
        f"The studio uses packages requirements.txt does not install: {', '.join(missing)}. "
        "Pin them in requirements.txt (requirements-dev.txt is for tests, lint and benchmarks)."
    )


def test_requirements_txt_holds_no_test_or_lint_package():
    runtime = {canonicalize_name(Requirement(line).name) for line in requirement_lines("requirements.txt")}
    development = {
        canonicalize_name(Requirement(line).name) for line in requirement_lines("requirements-dev.txt")
    }

    assert {"pytest", "pytest-django", "playwright", "ruff"} <= development
    assert not runtime & development
    assert "-r requirements.txt" in (ROOT / "requirements-dev.txt").read_text()
