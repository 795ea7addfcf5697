"""The version is in one place, studio/__init__.py: the CHANGELOG's newest
release names it, and the release is tagged v<version> in git."""

import re

import studio
from tests.support.sources import ROOT


def test_the_changelogs_newest_release_is_the_version_the_code_says():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), flags=re.MULTILINE)

    assert headings[0] == studio.__version__, (
        f"CHANGELOG.md's newest heading is {headings[0]!r} and studio/__init__.py says {studio.__version__!r}: "
        "a release's heading is its version"
    )


def test_the_version_is_one_pep_440_can_order():
    assert re.fullmatch(r"\d+\.\d+\.\d+", studio.__version__)
