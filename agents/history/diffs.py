"""Line-by-line diffs of two texts, bounded: what the checkpoint pages
and `GET …/checkpoints/{id}` show a summary or a memory's rewrite as."""

import difflib
from itertools import islice

# difflib matches two texts' lines by searching for the longest run they
# share, then again on either side of it: each search compares each line of
# one stretch with every place the other text holds it, so the work grows
# with the product of the texts' lines, and faster still on lines that
# repeat. Every diff shown is bounded instead: at most DIFF_MAX_LINES lines
# (both sides together, which also bounds what is shown) and
# DIFF_MAX_COMPARISONS comparisons of a line (or a word) with another, and
# one read's diffs DIFF_READ_MAX_COMPARISONS in all. Past any bound, the
# change is shown replaced whole, with both sides' sizes.
DIFF_MAX_LINES = 2_000
DIFF_MAX_COMPARISONS = 500_000
DIFF_READ_MAX_COMPARISONS = 2_000_000


class DiffBudget:
    """The comparisons one read's diffs may still make."""

    def __init__(self, comparisons: int = DIFF_READ_MAX_COMPARISONS):
        self.left = comparisons

    def opcodes(self, a: list, b: list) -> list | None:
        """difflib's opcodes from `a` to `b`, or None past the bounds."""
        matcher = _BoundedMatcher(a, b, allowance=max(0, min(DIFF_MAX_COMPARISONS, self.left)))
        try:
            return matcher.get_opcodes()
        except _OutOfComparisons:
            return None
        finally:
            self.left -= matcher.spent


class _OutOfComparisons(Exception):
    pass


class _BoundedMatcher(difflib.SequenceMatcher):
    """A SequenceMatcher that counts each search's comparisons before it
    makes them, and stops rather than pass its allowance."""

    def __init__(self, a: list, b: list, *, allowance: int):
        self.allowance, self.spent = allowance, 0
        super().__init__(None, a, b, autojunk=False)

    def find_longest_match(self, alo=0, ahi=None, blo=0, bhi=None):
        ahi = len(self.a) if ahi is None else ahi
        self.spent += ahi - alo
        for item in islice(self.a, alo, ahi):
            if self.spent > self.allowance:
                raise _OutOfComparisons
            self.spent += len(self.b2j.get(item, ()))
        if self.spent > self.allowance:
            raise _OutOfComparisons
        return super().find_longest_match(alo, ahi, blo, bhi)


def lines_diff(before: str | None, after: str | None, budget: DiffBudget) -> list[dict]:
    """`after` against `before`, line by line: each line `same`, `removed` or
    `added` — or, past the bounds of a diff, one `replaced` change with both
    sides' lengths in characters."""
    a, b = (before or "").splitlines(), (after or "").splitlines()
    opcodes = budget.opcodes(a, b) if len(a) + len(b) <= DIFF_MAX_LINES else None
    if opcodes is None:
        return [{"op": "replaced", "beforeChars": len(before or ""), "afterChars": len(after or "")}]
    lines = []
    for op, i1, i2, j1, j2 in opcodes:
        if op == "equal":
            lines += [{"op": "same", "text": text} for text in a[i1:i2]]
        else:
            lines += [{"op": "removed", "text": text} for text in a[i1:i2]]
            lines += [{"op": "added", "text": text} for text in b[j1:j2]]
    return lines


# Unchanged lines a page shows on either side of a change; longer unchanged
# runs fold into one line saying how many were left out.
CONTEXT_LINES = 2


def lines_in_context(lines: list[dict], context: int = CONTEXT_LINES) -> list[dict]:
    """A line diff (`lines_diff`) as a page shows it: the changes, each with
    `context` unchanged lines either side, and in place of the unchanged
    lines left out, a `gap` line with their `count` — so the first change
    is near the top of its box, not below a screenful of what stayed."""
    changed = [index for index, line in enumerate(lines) if line["op"] != "same"]
    if not changed:
        return lines
    shown = set()
    for index in changed:
        shown.update(range(max(index - context, 0), min(index + context + 1, len(lines))))
    out: list[dict] = []
    index = 0
    while index < len(lines):
        end = index
        while end < len(lines) and end not in shown:
            end += 1
        if end - index > 1:
            out.append({"op": "gap", "count": end - index})
        else:  # a gap of one line would take as much room as the line
            out += lines[index:end]
        if end < len(lines):
            out.append(lines[end])
        index = end + 1
    return out
