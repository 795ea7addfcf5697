"""How long the studio keeps each kind of record (`STUDIO_RETAIN_*`): read
from the environment, kept for good by default, documented."""

import re
from pathlib import Path

import pytest

from tests.support.settings import studio_settings

ROOT = Path(__file__).resolve().parents[2]
RETAIN = {
    "STUDIO_RETAIN_HISTORY_DAYS": "RETAIN_HISTORY_DAYS",
    "STUDIO_RETAIN_MEMORY_CHANGES_DAYS": "RETAIN_MEMORY_CHANGES_DAYS",
    "STUDIO_RETAIN_TURNS_DAYS": "RETAIN_TURNS_DAYS",
    "STUDIO_RETAIN_COST_LINES_DAYS": "RETAIN_COST_LINES_DAYS",
}


def test_by_default_every_kind_a_designer_can_reach_is_kept_for_good(monkeypatch):
    for variable in RETAIN:
        monkeypatch.delenv(variable, raising=False)

    conf = studio_settings(monkeypatch)

    assert {conf[key] for key in RETAIN.values()} == {0}


def test_each_kind_is_kept_as_many_days_as_its_variable_says(monkeypatch):
    env = {variable: str(days) for days, variable in enumerate(RETAIN, 30)}

    conf = studio_settings(monkeypatch, **env)

    assert [conf[key] for key in RETAIN.values()] == [30, 31, 32, 33]


@pytest.mark.parametrize("value", ["-1", "a week", "1.5"])
def test_a_retention_that_is_not_a_count_of_days_stops_start_up_naming_the_variable(monkeypatch, value):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match=r"^STUDIO_RETAIN_TURNS_DAYS must be "):
        studio_settings(monkeypatch, STUDIO_RETAIN_TURNS_DAYS=value)


def test_the_readme_configuration_table_documents_each_retention_variable():
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `([A-Z_]+)`", readme, flags=re.MULTILINE)

    assert set(RETAIN) <= set(rows)
