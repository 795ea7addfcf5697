"""Spend by agent on Billing: the last 30 days by kind, the most first, in
short amounts; and as CSV with the exact ones."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

from billing.models import CostKind, CostLine
from billing.selectors import spend_by_agent
from tests.conftest import error_of

CSV = "/studio/ashmere/billing/spend-by-agent.csv"


def line(game, agent, kind, amount, *, days_ago=0):
    made = CostLine.objects.create(
        game=game, agent_name=agent, kind=kind, label=CostKind(kind).label, quantity=1, amount=Decimal(amount)
    )
    if days_ago:
        CostLine.objects.filter(pk=made.pk).update(created_at=made.created_at - timedelta(days=days_ago))


def spends(game):
    line(game, "dm", CostKind.MODEL, "1.234567")
    line(game, "dm", CostKind.MEMORY_ACCESS, "0.003")
    line(game, "bard", CostKind.MODEL, "2.5")
    line(game, "dm", CostKind.COMPACTION, "0.0025")
    line(game, "bard", CostKind.MODEL, "40", days_ago=31)  # before the 30 days


def test_spend_by_agent_sums_each_agents_lines_by_kind_in_one_statement(game, django_assert_num_queries):
    spends(game)

    with django_assert_num_queries(1):
        rows = spend_by_agent(game=game)

    assert [(row.agent, row.total, row.lines) for row in rows] == [
        ("bard", Decimal("42.5"), 2),
        ("dm", Decimal("1.240067"), 3),
    ]
    assert (rows[1].model, rows[1].memory_access, rows[1].compaction) == (
        Decimal("1.234567"),
        Decimal("0.003"),
        Decimal("0.0025"),
    )


def test_the_billing_page_shows_the_last_30_days_by_agent(designer, game):
    spends(game)

    html = designer.get("/studio/ashmere/billing/?fragment=agent_spend").content.decode()

    assert html.index('data-agent-spend="bard"') < html.index('data-agent-spend="dm"')
    dm = html[html.index('data-agent-spend="dm"') :]
    assert '<span class="amount" title="1.234567 credits">1.23</span>' in dm
    assert '<span class="amount" title="0.002500 credits">0.0025</span>' in dm
    assert "33%" in dm  # of 3.740067
    assert 'title="3.740067 credits">3.74<' in html[html.index("data-agent-spend-total") :]


def test_the_csv_has_the_exact_amounts(designer, game):
    spends(game)

    answer = designer.get(CSV)

    assert answer.status_code == 200
    assert answer["Content-Type"] == "text/csv; charset=utf-8"
    assert 'filename="ashmere-spend-by-agent-' in answer["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert [
        (r["agent"], r["model"], r["memory_access"], r["compaction"], r["total"], r["lines"]) for r in rows
    ] == [
        ("bard", "2.500000", "0.000000", "0.000000", "2.500000", "1"),
        ("dm", "1.234567", "0.003000", "0.002500", "1.240067", "3"),
    ]


def test_the_csv_takes_another_span_of_days(designer, game):
    spends(game)

    rows = list(csv.DictReader(io.StringIO(designer.get(CSV + "?days=60").content.decode())))

    assert rows[0]["agent"] == "bard" and rows[0]["total"] == "42.500000"


def test_a_span_that_is_not_a_number_of_days_is_refused(designer, game):
    for days in ("0", "abc", "-3", "99999"):
        answer = designer.get(CSV + f"?days={days}")
        assert answer.status_code == 400
        assert error_of(answer)["code"] == "invalid_request"


def test_the_csv_is_for_the_games_members_only(client, outsider_client, game):
    assert outsider_client.get(CSV).status_code == 404
    assert client.get(CSV).status_code == 302  # to sign in


def copies_spend(game):
    """dm's two replays' copies spent beside dm itself."""
    line(game, "dm", CostKind.MODEL, "1")
    line(game, "dm~replay-0a1b2c3d4e", CostKind.MODEL, "0.25")
    line(game, "dm~replay-5f6a7b8c9d", CostKind.COMPACTION, "0.5")


def test_replays_copies_spend_shows_as_one_row_of_their_agents_replays(game):
    copies_spend(game)

    rows = spend_by_agent(game=game)

    assert [(row.agent, row.replays, row.total, row.lines) for row in rows] == [
        ("dm", False, Decimal("1"), 1),
        ("dm", True, Decimal("0.75"), 2),
    ]


def test_the_page_and_the_csv_name_no_copy(designer, game):
    copies_spend(game)

    html = designer.get("/studio/ashmere/billing/?fragment=agent_spend").content.decode()
    rows = list(csv.DictReader(io.StringIO(designer.get(CSV).content.decode())))

    assert "~replay" not in html
    assert "replays of dm" in html
    assert [(r["agent"], r["replays"], r["total"]) for r in rows] == [
        ("dm", "false", "1.000000"),
        ("dm", "true", "0.750000"),
    ]
