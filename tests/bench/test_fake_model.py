"""The benchmark's fake model measures each call's input against its
agent's last one (bench/README.md, "Tokens per call"). It reads a call that
extends the last one from where that ended; its records must be what
measuring every call whole gives — the prefix share `make bench` judges
depends on them."""

import json

from bench.fake_openai_server import common_prefix, compact, message_tokens, read_call, tools_tokens

TOOLS = [{"type": "function", "function": {"name": "open_memory", "parameters": {"type": "object"}}}]


def studio_layout(body: dict) -> str:
    """As the studio writes a model step's request: its messages first."""
    params = {key: value for key, value in body.items() if key != "messages"}
    parts = ",".join(json.dumps(m, ensure_ascii=False) for m in body["messages"])
    return '{"messages":[' + parts + "]," + json.dumps(params, ensure_ascii=False)[1:]


def measured_whole(bodies: list[dict]) -> list[dict]:
    """Each call's bytes, shared prefix and tokens, each input encoded whole."""
    last: dict[str, bytes] = {}
    out = []
    for body in bodies:
        data = compact([body.get("tools"), *body["messages"]])[:-1]
        agent = body["messages"][0]["content"]
        previous = last.get(agent)
        out.append(
            {
                "bytes": len(data),
                "prefix": common_prefix(previous, data) if previous else 0,
                "previous": len(previous) if previous else None,
                "tokens": tools_tokens(body.get("tools")) + sum(map(message_tokens, body["messages"])),
            }
        )
        last[agent] = data
    return out


def story() -> list[dict]:
    """Two agents' calls, interleaved: a history that grows, a key of an old
    message written in another order, the tools changed, a history folded
    away, a call in the SDK's layout."""
    tools, bodies = TOOLS, []
    histories = {name: [{"role": "system", "content": f"You keep table {name} — café."}] for name in "ab"}
    for number in range(12):
        for name, history in histories.items():
            history.append({"role": "user", "content": f"Message {number} «{name}»."})
            bodies.append({"messages": list(history), "model": "m", "stream": True, "tools": tools})
            call = {"name": "open_memory", "arguments": '{"name": "notes"}'}
            history.append({"role": "assistant", "tool_calls": [{"id": f"c{number}", "function": call}]})
            history.append({"role": "tool", "tool_call_id": f"c{number}", "content": "Open."})
            bodies.append({"messages": list(history), "model": "m", "stream": True, "tools": tools})
            history.append({"role": "assistant", "content": f"Reply {number}."})
        if number == 4:
            old = histories["a"][1]
            histories["a"][1] = {key: old[key] for key in reversed(old)}
        if number == 7:
            tools = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "description": "Opens one."}}]
        if number == 9:
            histories["b"][1:] = [{"role": "user", "content": "The story so far."}]
    return bodies


def test_each_record_is_what_measuring_the_call_whole_gives():
    bodies = story()
    records = []
    for arrival, body in enumerate(bodies, 1):
        text = json.dumps(body, ensure_ascii=False) if arrival % 6 == 1 else studio_layout(body)
        read, prompt, record = read_call(text, 10_000 + arrival)
        assert read == body
        assert prompt == record["tokens"]
        records.append({key: record[key] for key in ("bytes", "prefix", "previous", "tokens")})

    assert records == measured_whole(bodies)
    # The story does break the prefix: a reordered key, new tools, a folded history.
    assert sum(r["prefix"] < r["previous"] for r in records if r["previous"]) >= 3
