"""The studio's token counts are cl100k_base's, from the bundled copy."""

import threading
import time

import pytest

from studio import tokens


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("", 0),
        ("hello world", 2),
        # A special token's text inside content is counted as plain text.
        ("Mara is looking for her sister Ilsa. <|endoftext|> done", 17),
        ("Ærø — 東京 🎲 x=1;", 15),
    ],
)
def test_counts_are_cl100k_counts(text, count):
    assert tokens.count_tokens(text) == count


def test_a_burst_of_first_counts_builds_the_encoding_once(monkeypatch):
    """Building the encoding takes a good part of a second of CPU. A fresh
    web process's first burst of sends all count tokens at once, each
    holding a database connection: were each to build its own encoding,
    the pool would run dry for seconds."""
    builds = []
    build = tokens.tiktoken.Encoding

    def counted(*args, **kwargs):
        builds.append(1)
        time.sleep(0.05)  # a window for another thread to come in
        return build(*args, **kwargs)

    monkeypatch.setattr(tokens.tiktoken, "Encoding", counted)
    monkeypatch.setattr(tokens, "_built", None)
    start = threading.Barrier(8)

    def first_count():
        start.wait()
        tokens.count_tokens("hello world")

    threads = [threading.Thread(target=first_count) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    monkeypatch.undo()

    assert len(builds) == 1


def test_a_web_process_that_cannot_build_the_encoding_does_not_start(monkeypatch):
    def broken():
        raise FileNotFoundError("cl100k_base.tiktoken")

    monkeypatch.setattr(tokens, "_build", broken)
    monkeypatch.setattr(tokens, "_built", None)

    with pytest.raises(FileNotFoundError):
        tokens.encoding_load()
