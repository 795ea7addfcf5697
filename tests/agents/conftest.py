"""Fixtures of the agents tests: counting the work difflib does, for tests
that bound it (each search for a longest match compares every line, or
word, of its stretch of one text with each place the other text holds it)."""

import difflib
from itertools import islice

import pytest


class Comparisons:
    def __init__(self):
        self.count = 0


@pytest.fixture
def comparisons(monkeypatch) -> Comparisons:
    """How many comparisons difflib made, from here on (in this thread)."""
    counted = Comparisons()
    search = difflib.SequenceMatcher.find_longest_match

    def counting(self, alo=0, ahi=None, blo=0, bhi=None):
        ahi = len(self.a) if ahi is None else ahi
        counted.count += ahi - alo
        counted.count += sum(len(self.b2j.get(item, ())) for item in islice(self.a, alo, ahi))
        return search(self, alo, ahi, blo, bhi)

    monkeypatch.setattr(difflib.SequenceMatcher, "find_longest_match", counting)
    return counted
