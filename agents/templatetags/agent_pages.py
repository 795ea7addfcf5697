"""Small formatting for the Agents pages: numbers, times, tool arguments,
who defined a config."""

import json
from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html

from agents.history.diffs import lines_in_context
from agents.provenance import provenance_phrase
from agents.selectors import agent_origin
from studio.pages.helpers import time_ago

register = template.Library()


@register.filter
def thousands(value) -> str:
    """1234 → '1,234' (tokens and counts read better grouped)."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "" if value is None else str(value)


@register.filter
def pretty(value) -> str:
    """A tool argument as the model wrote it: text as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


@register.simple_tag
def when(value):
    """A <time> saying how long ago, with the exact time on hover."""
    moment = parse_datetime(value) if isinstance(value, str) else value
    if not isinstance(moment, datetime):
        return ""
    local = timezone.localtime(moment)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        moment.isoformat(),
        local.strftime("%Y-%m-%d %H:%M:%S %Z"),
        time_ago(moment),
    )


@register.filter
def tojson(value) -> str:
    """For a data-* attribute a script reads (autoescape quotes it)."""
    return json.dumps(value, ensure_ascii=False)


# The most characters of a call's arguments shown on one line.
BRIEF_JSON_MAX_CHARS = 200


@register.filter
def brief_json(value) -> str:
    """A call's arguments on one line, as JSON, cut to BRIEF_JSON_MAX_CHARS."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= BRIEF_JSON_MAX_CHARS else text[:BRIEF_JSON_MAX_CHARS] + "…"


@register.simple_tag
def deadline(value):
    """A <time> at a moment to come, its local time of day shown (the date
    too when it is not today), the exact time on hover."""
    moment = parse_datetime(value) if isinstance(value, str) else value
    if not isinstance(moment, datetime):
        return ""
    local = timezone.localtime(moment)
    same_day = local.date() == timezone.localtime().date()
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        moment.isoformat(),
        local.strftime("%Y-%m-%d %H:%M:%S %Z"),
        local.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S"),
    )


@register.filter
def arg_pairs(arguments) -> list | None:
    """A tool call's arguments as (name, value) rows, or None when they are
    not an object (shown as JSON instead)."""
    return list(arguments.items()) if isinstance(arguments, dict) and arguments else None


@register.filter
def in_context(lines) -> list:
    """A line diff with long unchanged runs folded (`lines_in_context`)."""
    return lines_in_context(lines or [])


@register.simple_tag
def provenance(revision):
    """Who defined a config revision and from where ("Defined by game code —
    key <code>server</code>"), its names escaped."""
    phrase, names = provenance_phrase(revision)
    return format_html(
        phrase,
        key=format_html("<code>{}</code>", names.get("key", "")),
        user=names.get("user", ""),
    )


@register.inclusion_tag("agents/_origin.html", takes_context=True)
def origin(context, agent):
    """What `agent` was made as, said on each of its pages: a replay's
    copy (and its replay), or a fork (from which agent, at which block)."""
    return {"game": context["game"], "agent": agent, "origin": agent_origin(agent)}
