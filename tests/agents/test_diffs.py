"""Every diff the studio shows is bounded: past DIFF_MAX_LINES lines, or
past its share of comparisons, a change is shown replaced whole with both
sides' sizes — so no text, however made, holds a request for long."""

import pytest

from agents.history import diffs
from agents.history.diffs import (
    DIFF_MAX_COMPARISONS,
    DIFF_MAX_LINES,
    DiffBudget,
    lines_diff,
    lines_in_context,
)
from memories.pages import diff_html
from tests.support.agent_file import agent_file, change, checkpoint, memory, state

IMPORT = "/api/v1/agents/import"
PAGES = "/studio/ashmere/agents"

# Lines that are all alike: each line of one text matches every line of
# the other, so a line diff compares them pair by pair.
SAME_LINES = ("x\n" * 900, "x\n" * 901)
# Worse: one text's lines each match every other line of the other, but
# never two in a row, so the diff searches again after every match.
NEVER_TWO_IN_A_ROW = ("a\n" * 600, "a\nb\n" * 300)


def replaced(before: str, after: str) -> list[dict]:
    return [{"op": "replaced", "beforeChars": len(before), "afterChars": len(after)}]


def test_a_diff_shows_each_line_same_removed_or_added():
    lines = lines_diff("The chapel.\nThe bells.\nThe key.", "The chapel.\nThe key.\nThe river.", DiffBudget())

    assert lines == [
        {"op": "same", "text": "The chapel."},
        {"op": "removed", "text": "The bells."},
        {"op": "same", "text": "The key."},
        {"op": "added", "text": "The river."},
    ]


@pytest.mark.parametrize("before, after", [SAME_LINES, NEVER_TWO_IN_A_ROW], ids=["same", "never-two"])
def test_a_diff_past_its_comparisons_is_replaced_whole_with_both_sizes(comparisons, before, after):
    assert before.count("\n") + after.count("\n") <= DIFF_MAX_LINES

    lines = lines_diff(before, after, DiffBudget())

    assert lines == replaced(before, after)
    assert comparisons.count <= DIFF_MAX_COMPARISONS + len(before)


def test_a_diff_of_more_lines_than_the_bound_is_replaced_whole_without_comparing(comparisons):
    half = DIFF_MAX_LINES // 2
    before = "".join(f"line {n}\n" for n in range(half))

    assert lines_diff(before, before + "one more\n", DiffBudget()) == replaced(before, before + "one more\n")
    assert comparisons.count == 0
    shorter = lines_diff(before, before.removesuffix(f"line {half - 1}\n"), DiffBudget())
    assert shorter[-1] == {"op": "removed", "text": f"line {half - 1}"}


def test_one_reads_diffs_share_one_allowance(comparisons):
    budget = DiffBudget()
    pairs = 0
    while budget.left > 0:
        assert lines_diff(*SAME_LINES, budget) == replaced(*SAME_LINES)
        pairs += 1

    assert lines_diff("a\nb", "a\nc", budget) == replaced("a\nb", "a\nc")
    assert comparisons.count <= diffs.DIFF_READ_MAX_COMPARISONS + pairs * len(SAME_LINES[0])


def test_no_text_against_no_text_is_no_change_however_spent_the_allowance():
    budget = DiffBudget()
    while budget.left >= 0:
        lines_diff(*SAME_LINES, budget)

    assert lines_diff(None, None, budget) == []
    assert lines_diff(None, "a", budget) == [{"op": "added", "text": "a"}]


def test_a_short_diff_after_a_long_one_is_still_shown_line_by_line():
    budget = DiffBudget()
    lines_diff(*SAME_LINES, budget)

    assert lines_diff("a\nb", "a\nc", budget)[0] == {"op": "same", "text": "a"}


# --- on the Memories page ---------------------------------------------------------------------


@pytest.mark.parametrize("before, after", [SAME_LINES, NEVER_TWO_IN_A_ROW], ids=["same", "never-two"])
def test_the_pages_diff_past_its_comparisons_is_none_for_the_page_to_say_so(comparisons, before, after):
    assert diff_html(before, after, DiffBudget()) is None
    assert comparisons.count <= DIFF_MAX_COMPARISONS + len(before)


def test_the_pages_word_diff_is_bounded_too(comparisons):
    before, after = "a " * 1000, "a b " * 500  # one changed line of 2,000 words

    html = diff_html(before, after, DiffBudget())

    assert html == f"<del>{before}</del><ins>{after}</ins>"
    assert comparisons.count <= DIFF_MAX_COMPARISONS + 2 * len(before)


# --- in the API and on the pages ----------------------------------------------------------------


@pytest.fixture
def summaries_alike(admin_api):
    """An agent `big` whose second checkpoint's summary is the first's with a line more."""
    document = agent_file("big", checkpoints=[checkpoint(1, SAME_LINES[0]), checkpoint(2, SAME_LINES[1])])
    assert admin_api.post(IMPORT, document, format="json").status_code == 201


@pytest.fixture
def rewritten_alike(admin_api):
    """An agent `big` whose memory `notes` was rewritten into much the same lines."""
    before, after = state("notes", SAME_LINES[0]), state("notes", SAME_LINES[1])
    document = agent_file(
        "big",
        memories=[memory("notes", SAME_LINES[1], is_open=True)],
        memoryHistory=[change("notes", "created", None, before), change("notes", "updated", before, after)],
    )
    assert admin_api.post(IMPORT, document, format="json").status_code == 201


@pytest.mark.django_db
def test_a_checkpoints_summary_change_past_the_bounds_is_one_replaced_change(api, summaries_alike):
    changes = api.get("/api/v1/agents/big/checkpoints/2").json()["changes"]

    assert changes["summary"]["lines"] == replaced(*SAME_LINES)
    assert changes["summary"]["after"] == SAME_LINES[1]


@pytest.mark.django_db
def test_the_checkpoints_page_says_a_change_past_the_bounds_was_replaced_whole(designer, summaries_alike):
    html = designer.get(f"{PAGES}/big/checkpoints/").content.decode()

    second = html[html.index('id="checkpoint-2"') : html.index('id="checkpoint-1"')]
    assert "shown replaced whole: 1,800 characters before, 1,802 after" in second
    assert "− x" not in second and "+ x" not in second


@pytest.mark.django_db
def test_the_memories_page_says_a_rewrite_past_the_bounds_was_replaced_whole(designer, rewritten_alike):
    html = designer.get(f"{PAGES}/big/memories/").content.decode()

    assert "shown replaced whole: 1,800 characters before, 1,802 after" in html
    assert 'class="text compact diff"' not in html
    assert "Before and after in full" in html


def test_a_page_shows_each_change_with_two_lines_either_side_and_counts_the_rest():
    same = [{"op": "same", "text": f"line {n}"} for n in range(1, 11)]
    lines = [*same, {"op": "added", "text": "new"}, *same[:3]]

    shown = lines_in_context(lines)

    assert shown == [{"op": "gap", "count": 8}, same[8], same[9], lines[10], same[0], same[1], same[2]]


def test_a_gap_of_one_line_shows_the_line():
    lines = [{"op": "same", "text": t} for t in "abc"] + [{"op": "removed", "text": "d"}]

    assert lines_in_context(lines) == lines
