"""The studio's token counts are cl100k_base's, from the bundled copy."""

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
