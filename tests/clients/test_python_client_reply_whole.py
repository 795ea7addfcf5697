"""The Python client's `on_text` hears the whole reply, each piece once:
when a try followed the turn after its words had left the studio's buffer
(no `reply.delta` brought them), `turn.finished` hands on the rest."""

import json

from studio_client._common import EventStreamReader


def fed(reader: EventStreamReader, *events: tuple[str, int, dict]) -> list[str]:
    """What `reader` hands on as the reply's pieces, fed the events (type, seq, data)."""
    pieces = []
    for kind, seq, data in events:
        for line in (f"event: {kind}", f"id: {seq}", f"data: {json.dumps(data)}", ""):
            text = reader.line(line)
            if text:
                pieces.append(text)
    return pieces


def finished(reply: str) -> tuple[str, int, dict]:
    return ("turn.finished", 9, {"turn": {"id": "t1", "reply": reply}})


def test_a_reply_no_delta_brought_is_handed_on_whole_at_the_turns_end():
    reader = EventStreamReader()

    pieces = fed(reader, ("turn.started", 1, {"turnId": "t1"}), finished("The bells ring."))

    assert pieces == ["The bells ring."]
    assert reader.turn["reply"] == "The bells ring."


def test_the_words_after_the_last_delta_heard_come_at_the_turns_end_and_none_twice():
    reader = EventStreamReader()

    pieces = fed(
        reader,
        ("reply.delta", 2, {"turnId": "t1", "text": "The "}),
        ("reply.delta", 3, {"turnId": "t1", "text": "bells "}),
        finished("The bells ring."),
    )

    assert pieces == ["The ", "bells ", "ring."]


def test_a_reply_heard_whole_gets_nothing_more_at_the_end():
    reader = EventStreamReader()

    pieces = fed(reader, ("reply.delta", 2, {"turnId": "t1", "text": "Done."}), finished("Done."))

    assert pieces == ["Done."]
