"""Numbers and UUIDs in URLs are read in ASCII, as the studio writes them."""

import uuid

import pytest

from studio.http.params import uuid_of, whole_number


@pytest.mark.parametrize("text, number", [("0", 0), ("7", 7), ("007", 7), ("123456789", 123456789)])
def test_a_whole_number_in_ascii_digits_is_read(text, number):
    assert whole_number(text, max_digits=9) == number


@pytest.mark.parametrize("text", ["", "³", "١", "１", "1_0", " 7", "7 ", "+7", "-7", "7.0", "1234567890"])
def test_anything_else_is_no_whole_number(text):
    assert whole_number(text, max_digits=9) is None


def test_a_uuid_as_the_studio_writes_it_is_read():
    written = uuid.uuid4()

    assert uuid_of(str(written)) == written


@pytest.mark.parametrize(
    "spelling",
    [
        str.upper,
        lambda t: t.replace("-", ""),
        lambda t: "{" + t + "}",
        lambda t: "urn:uuid:" + t,
        lambda t: t + "\n",
    ],
)
def test_another_spelling_of_a_uuid_is_none(spelling):
    assert uuid_of(spelling(str(uuid.uuid4()))) is None
