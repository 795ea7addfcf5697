""".env.example lists every environment variable the studio's code reads,
and nothing else: the code is read for them (not imported), so a variable
added anywhere outside tests/ and bench/ is caught."""

import ast
import functools
import os
import re
import runpy
import secrets

from tests.support.sources import ROOT, source_files

# Variables a library the studio uses reads itself (no code of ours does),
# which an operator may still need to set.
LIBRARY_VARIABLES: frozenset[str] = frozenset()
SECRET_KEY = secrets.token_urlsafe(50)
EXAMPLE_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def is_os_environ(node) -> bool:
    """`os.environ`, or `environ` imported from os."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id == "environ"


def called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def read_arguments(tree, helpers: set[str]):
    """(node, expression naming the variable) for every read of the
    environment: os.environ.get / [] / `in`, os.getenv, and calls of
    `helpers` (functions that read the variable their argument names).
    os.environ.setdefault is not a read: it sets a default for this process."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            reads_environ = (
                isinstance(func, ast.Attribute) and func.attr == "get" and is_os_environ(func.value)
            )
            if reads_environ or called_name(node) == "getenv" or called_name(node) in helpers:
                yield node, node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_os_environ(node.value):
            yield node, node.slice
        elif isinstance(node, ast.Compare) and is_os_environ(node.comparators[0]):
            if isinstance(node.ops[0], (ast.In, ast.NotIn)):
                yield node, node.left


def helper_functions(trees) -> tuple[set[str], set[int]]:
    """Functions that pass one of their parameters on as a variable's name
    (`env_int(name, default)`), found until no more turn up; and the reads
    inside them, which name no variable themselves."""
    helpers, inside = set(), set()
    while True:
        found = set(helpers)
        for tree in trees:
            for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
                parameters = {arg.arg for arg in function.args.args + function.args.kwonlyargs}
                for node, argument in read_arguments(function, helpers):
                    if isinstance(argument, ast.Name) and argument.id in parameters:
                        found.add(function.name)
                        inside.add(id(node))
        if found == helpers:
            return helpers, inside
        helpers = found


def environment_variables_read(files: dict[str, str]) -> tuple[set[str], list[str]]:
    """The variables the given sources (name -> text) read, and where they
    read one whose name is not written out (which this test cannot check)."""
    trees, helpers = {}, set()
    while True:
        # Only a file that names the environment, or a helper found reading
        # it, can read a variable: the others (most) are not parsed.
        words = ("environ", "getenv", *helpers)
        trees |= {
            name: ast.parse(text)
            for name, text in files.items()
            if name not in trees and any(word in text for word in words)
        }
        found, inside_helpers = helper_functions(trees.values())
        if found == helpers:
            break
        helpers = found
    names, unreadable = set(), []
    for file, tree in trees.items():
        for node, argument in read_arguments(tree, helpers):
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                names.add(argument.value)
            elif id(node) not in inside_helpers:
                unreadable.append(f"{file}:{node.lineno}")
    return names, unreadable


@functools.cache  # the code is parsed once a run, not once a test (~6 s each)
def studio_variables() -> tuple[frozenset[str], tuple[str, ...]]:
    names, problems = environment_variables_read(
        {str(path.relative_to(ROOT)): path.read_text() for path in source_files()}
    )
    return frozenset(names), tuple(problems)


def example_environment() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    return dict(match.groups() for line in lines if (match := EXAMPLE_LINE.match(line)))


def test_the_reader_finds_every_way_the_code_reads_the_environment():
    source = """
import os
from os import environ

def env_bool(name, default=False):
    return os.environ.get(name) in {"1", "true"}

def env_seconds(name):
    return float(env_bool(name))

A = os.environ.get("A_GET", "x")
B = os.getenv("B_GETENV")
C = os.environ["C_ITEM"]
D = "D_IN" in os.environ
E = env_bool("E_HELPER")
F = env_seconds("F_HELPER_OF_A_HELPER")
G = environ.get("G_IMPORTED")
os.environ.setdefault("NOT_A_READ", "1")
H = os.environ.get(f"H_{A}")
"""
    names, unreadable = environment_variables_read({"example.py": source})

    assert names == {"A_GET", "B_GETENV", "C_ITEM", "D_IN", "E_HELPER", "F_HELPER_OF_A_HELPER", "G_IMPORTED"}
    assert unreadable == ["example.py:19"]


def test_every_variable_the_code_reads_is_in_env_example():
    read, unreadable = studio_variables()

    assert not unreadable, (
        f"These read an environment variable whose name is not written out, so this test cannot "
        f"check .env.example for it; write the name as a literal: {unreadable}"
    )
    missing = sorted(read - set(example_environment()))
    assert not missing, (
        f".env.example lacks variables the code reads: {', '.join(missing)}. "
        "Add each with its default value and a comment on what it does."
    )


def test_every_variable_in_env_example_is_read_by_the_code():
    read, _ = studio_variables()

    stale = sorted(set(example_environment()) - read - LIBRARY_VARIABLES)
    assert not stale, (
        f".env.example lists variables no code of the studio reads: {', '.join(stale)}. "
        "Remove them, or, if a library reads one itself, add it to LIBRARY_VARIABLES in this test."
    )


def test_the_settings_load_from_env_example_as_it_stands(monkeypatch):
    for name, value in example_environment().items():
        monkeypatch.setenv(name, value)
    # The one value an operator must choose.
    monkeypatch.setenv("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))

    settings = runpy.run_path(str(ROOT / "studio" / "settings.py"))

    assert settings["DEBUG"] is False
    assert settings["STUDIO"]["SEND_RATE"] == (100, 1)


def readme_configuration_variables() -> set[str]:
    """The variables the README's configuration table has a row for: every
    name written in a row's first cell."""
    rows = re.findall(r"^\| ([^|]+) \|", (ROOT / "README.md").read_text(), flags=re.MULTILINE)
    return {name for cell in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cell)}


def test_the_readme_configuration_table_has_a_row_for_every_variable_the_code_reads():
    read, _ = studio_variables()

    missing = sorted(read - readme_configuration_variables())
    assert not missing, (
        f"The README's configuration table lacks variables the code reads: {', '.join(missing)}. "
        "Add a row for each: its default and what it does."
    )


def settings_with(monkeypatch, values: dict[str, str]) -> dict:
    """The settings module as it loads with exactly `values` among the
    variables .env.example lists (and a secret key), no .env file read."""
    for name in example_environment():
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("STUDIO_ENV_FILE", os.devnull)
    monkeypatch.setenv("DJANGO_SECRET_KEY", SECRET_KEY)
    return runpy.run_path(str(ROOT / "studio" / "settings.py"))


def test_every_value_in_env_example_is_the_default(monkeypatch):
    """Copied as it stands, .env.example changes nothing: the studio runs as
    with none of them set (embedded, DEBUG off)."""
    example = {name: value for name, value in example_environment().items() if name != "STUDIO_ENV_FILE"}
    read_from_example = settings_with(monkeypatch, example)
    read_from_nothing = settings_with(monkeypatch, {})

    differ = sorted(
        name
        for name, value in read_from_example.items()
        if name.isupper() and repr(value) != repr(read_from_nothing.get(name))
    )
    assert not differ, f".env.example sets these settings to other than their defaults: {differ}"
    assert read_from_example["DATABASES"]["default"]["ENGINE"] == "django.db.backends.sqlite3"
    assert read_from_example["REDIS_URL"] == ""
