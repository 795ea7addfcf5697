"""A streamed answer comes in as many pieces as the model chooses — a
reply, a refusal, a tool call's arguments, one character at a time if it
likes. Each is read whole, and no piece is copied onto the text so far
(a string grown by `+=` on an attribute is copied whole at every piece:
the square of the pieces' count)."""

import json

import httpx2
import pytest

from agents.providers import anthropic_messages, http1, openai_chat

PIECES = 20_000


class Piece(str):
    """A streamed piece that counts each string built by adding it to
    another, or another to it."""

    added = 0

    def __add__(self, other):
        Piece.added += 1
        return str.__add__(self, other)

    def __radd__(self, other):
        Piece.added += 1
        return str.__add__(other, self)


def pieces(text: str) -> list[Piece]:
    return [Piece(character) for character in text]


def test_an_openai_answer_in_many_pieces_is_read_whole_and_never_copied_piece_by_piece():
    Piece.added = 0
    answer, calls, heard = openai_chat._Streamed(), {}, []
    reply, refusal = "ab" * (PIECES // 2), "no" * (PIECES // 2)
    arguments = json.dumps({"name": "x" * PIECES})
    for piece in pieces(reply):
        answer._add({"content": piece}, calls, heard.append)
    for piece in pieces(refusal):
        answer._add({"refusal": piece}, calls, heard.append)
    answer._add(
        {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "open_memory"}}]}, calls, heard.append
    )
    for piece in pieces(arguments):
        answer._add({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, calls, heard.append)
    finish = json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})

    read = answer._read(iter([finish]), calls, heard.append)

    assert Piece.added == 0
    assert (read.text, read.refusal) == (reply, refusal)
    assert [(call.id, call.name, call.arguments) for call in read.tool_calls] == [
        ("c1", "open_memory", {"name": "x" * PIECES})
    ]
    assert "".join(heard) == reply  # each piece heard as it came


def test_openai_tool_arguments_streamed_as_an_object_are_read_as_that_object():
    """A compatible server may send a call's arguments as JSON itself,
    not as its text: they are read as the text they would have been."""
    data = [
        json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]})
        for piece in (
            {"index": 0, "id": "c1", "function": {"name": "open_memory", "arguments": {"name": "notes"}}},
        )
    ]
    data.append(json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}))

    read = openai_chat._Streamed.read(iter(data), lambda text: None)

    assert [(call.name, call.arguments) for call in read.tool_calls] == [("open_memory", {"name": "notes"})]


def test_an_anthropic_message_in_many_pieces_is_read_whole_and_never_copied_piece_by_piece():
    Piece.added = 0
    message, heard = anthropic_messages._Message(), []
    first, second = "ab" * (PIECES // 2), "cd" * (PIECES // 2)
    message.add({"type": "message_start", "message": {"usage": {"input_tokens": 10}}}, heard.append)
    # Two adjacent text blocks (a citation splits them) and a third after a tool call.
    for index, text in enumerate((first, second)):
        message.add(
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
            None,
        )
        for piece in pieces(text):
            delta = {"type": "text_delta", "text": piece}
            message.add({"type": "content_block_delta", "index": index, "delta": delta}, heard.append)
    tool = {"type": "tool_use", "id": "t1", "name": "open_memory", "input": {}}
    message.add({"type": "content_block_start", "index": 2, "content_block": tool}, None)
    for piece in pieces(json.dumps({"name": "notes"})):
        delta = {"type": "input_json_delta", "partial_json": piece}
        message.add({"type": "content_block_delta", "index": 2, "delta": delta}, None)
    message.add(
        {"type": "content_block_start", "index": 3, "content_block": {"type": "text", "text": "Done."}}, None
    )
    message.add(
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}, None
    )

    text = anthropic_messages._text_of(message.content)
    calls = [anthropic_messages._tool_input(block) for block in message.content if block.type == "tool_use"]

    assert Piece.added == 0
    assert text == first + second + "\n\nDone."
    assert calls == [{"name": "notes"}]
    assert "".join(heard) == first + second
    assert message.billed_so_far().output_tokens >= 9


def test_an_anthropic_text_delta_that_is_not_text_is_passed_over():
    message = anthropic_messages._Message()
    message.add(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Hi"}}, None
    )
    for piece in ({"not": "text"}, 5, None, " there"):
        delta = {"type": "text_delta", "text": piece}
        message.add({"type": "content_block_delta", "index": 0, "delta": delta}, None)

    assert anthropic_messages._text_of(message.content) == "Hi there"


class Chunk(bytes):
    """A piece of a streamed answer's bytes that counts each bytes object
    built by adding it to another (the events so far grown by `+=`, a copy
    of them all); a bytearray extended in place is not counted."""

    added = 0

    def __radd__(self, other):
        if not isinstance(other, bytes):
            return NotImplemented
        Chunk.added += 1
        return bytes.__add__(other, self)


EVENTS_TEXT = (
    b": a comment\r\n"
    b'event: message_start\r\ndata: {"a": 1}\r\n\r\n'
    b"data: first\ndata: second\n\n"
    b"event: ping\rdata: lone CRs\r\r"
    b"data:no space\r\n\r\n"
    b"id: 7\nretry: 10\n\n"
    b"data: \xc3\xa9 and the end"
)


def test_events_read_alike_however_the_server_cuts_the_stream():
    whole = list(http1.sse_events([EVENTS_TEXT]))
    assert whole == [
        ("message_start", '{"a": 1}'),
        (None, "first\nsecond"),
        ("ping", "lone CRs"),
        (None, "no space"),
        (None, "\u00e9 and the end"),
    ]
    for size in (1, 2, 3, 5, 7, 16):
        cut = [EVENTS_TEXT[i : i + size] for i in range(0, len(EVENTS_TEXT), size)]
        assert list(http1.sse_events(cut)) == whole, size
    for at in range(1, len(EVENTS_TEXT)):  # every place one cut can fall, a CRLF's middle too
        assert list(http1.sse_events([EVENTS_TEXT[:at], EVENTS_TEXT[at:]])) == whole, at


def test_one_long_event_in_many_chunks_is_never_copied_chunk_by_chunk():
    Chunk.added = 0
    line = b"data: " + b"x" * PIECES
    chunks = [Chunk(line[i : i + 1]) for i in range(len(line))] + [Chunk(b"\n\n")]

    assert list(http1.sse_events(chunks)) == [(None, "x" * PIECES)]
    assert Chunk.added == 0


def test_a_line_past_the_bound_ends_the_answer_as_a_protocol_error(monkeypatch):
    monkeypatch.setattr(
        http1, "SSE_LINE_MAX_BYTES", 1000, raising=False
    )  # (raising: so a studio without the bound fails below)
    read = []

    def chunks():
        yield b"data: fine\n\n"
        while True:
            read.append(100)
            yield b"y" * 100

    with pytest.raises(httpx2.RemoteProtocolError, match="longer than 1000 bytes"):
        list(http1.sse_events(chunks()))
    assert sum(read) <= 1000 + 100  # read no further than the chunk that passed the bound
