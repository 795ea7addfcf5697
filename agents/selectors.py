"""Reads: what a turn looks like to its readers (the API, the pages, the
events), built in one place."""

from billing import ledger

from .models import Block, Turn


def turn_cost(turn: Turn, lines: list | None = None) -> dict:
    lines = ledger.turn_lines(turn.uuid) if lines is None else ledger.lines_in_order(lines)
    return {
        "total": ledger.credits_text(sum((line.amount for line in lines), 0)),
        "lines": [
            {
                "kind": line.kind,
                "label": line.label,
                "quantity": line.quantity,
                "amount": ledger.credits_text(line.amount),
            }
            for line in lines
        ],
    }


def turn_tool_calls(turn: Turn, entries: list | None = None) -> list[dict]:
    if entries is None:
        block = Block.objects.filter(turn=turn).only("entries").first()
        entries = block.entries if block else []
    return [
        {"name": e["name"], "arguments": e["arguments"], "result": e["result"], "isError": e["isError"]}
        for e in entries
        if e["type"] == "tool_call"
    ]
