"""Events for tests of the event buffers themselves: any catalogue event
will do, so a probe is a `reply.delta` of no real turn that carries a number."""

from studio.live import event_types

PROBE = "probe"


def probe(n: int) -> dict:
    return event_types.reply_delta(agent=PROBE, turn_id=PROBE, text=str(n))


def probe_n(event: dict) -> int | None:
    """The number a probe carries; None for any other event."""
    return int(event["text"]) if event.get("turnId") == PROBE else None
