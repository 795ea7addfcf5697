"""The studio's own Python sources: everything but the tests, the
benchmarks and the game-code clients with their examples (programs of
their own, with their own requirements), which the studio does not run."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIPPED_AT_ROOT = {"tests", "bench", "staticfiles", "clients", "examples"}
SKIPPED_ANYWHERE = {".git", ".venv", "__pycache__", "node_modules"}


def source_files() -> list[Path]:
    files = []
    for folder, subfolders, names in os.walk(ROOT):
        skipped = SKIPPED_ANYWHERE | (SKIPPED_AT_ROOT if Path(folder) == ROOT else set())
        subfolders[:] = [name for name in subfolders if name not in skipped]
        files += [Path(folder) / name for name in names if name.endswith(".py")]
    # Python scripts without the suffix (scripts/studioctl).
    files += [path for path in (ROOT / "scripts").iterdir() if path.is_file() and is_python_script(path)]
    return files


def is_python_script(path: Path) -> bool:
    with open(path, "rb") as file:
        first = file.readline()
    return first.startswith(b"#!") and b"python" in first
