"""An agent file as the export answers it."""

from asgiref.sync import async_to_sync


async def _joined(chunks) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def streamed(response) -> bytes:
    """The whole body of a streamed export (asserting it was streamed)."""
    assert response.streaming, "an export is streamed"
    return async_to_sync(_joined)(response.streaming_content)
