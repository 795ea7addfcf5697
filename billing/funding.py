"""Whether a game can fund a send now, in words a person acts on — for the
games list, the Billing page, the agents list and an agent's page — with
the way to the fix: the studio's operators (staff users) add credits and
raise caps, and get a link to do it; everyone else is told to ask them.

A send holds its model call's worst case before it runs
(`ledger.hold_estimate` at its model's price, for its maxTokens), and is refused when the game's room
(`ledger.Room`: the balance less every hold, what the monthly cap leaves)
cannot take that hold.
"""

from dataclasses import dataclass
from decimal import Decimal

from django.urls import reverse

from agents.models import Agent
from studio.models import Game

from . import ledger
from .ledger import SHORT_OF_CAP, SHORT_OF_CREDITS, credits_shown
from .models import Account, RefusalCause

# The refusals a page may show, by what would lift them (None: either).
REFUSAL_SHORT_OF = {
    "budget_exhausted": SHORT_OF_CREDITS,
    "spend_cap_reached": SHORT_OF_CAP,
    "insufficient_credits": None,
}


@dataclass(frozen=True)
class Send:
    """One agent's next send: what it holds, and what stops it (None:
    nothing) — by what would lift it (`short_of`) and its real cause
    (`cause`, a `RefusalCause`)."""

    agent: str
    hold: Decimal
    short_of: str | None
    cause: str | None = None

    @property
    def cause_label(self) -> str:
        return RefusalCause(self.cause).label if self.cause else ""


@dataclass(frozen=True)
class Funding:
    """Each of the game's agents' next sends against its room now, cheapest first."""

    game: Game
    room: ledger.Room
    sends: list[Send]
    is_operator: bool = False

    @property
    def refused(self) -> list[Send]:
        return [send for send in self.sends if send.short_of]

    @property
    def funded(self) -> list[Send]:
        return [send for send in self.sends if not send.short_of]

    @property
    def state(self) -> str:
        """ "ok", "some" (some agents' sends are refused), "none", or "no_agents"."""
        if not self.sends:
            return "no_agents"
        if not self.refused:
            return "ok"
        return "none" if len(self.refused) == len(self.sends) else "some"

    @property
    def is_refused(self) -> bool:
        return bool(self.refused)

    @property
    def headline(self) -> str:
        return {
            "ok": "Sends can be funded",
            "some": "Some agents’ sends are refused",
            "none": "Sends are refused",
            "no_agents": "No agents yet",
        }[self.state]

    @property
    def sentence(self) -> str:
        room = self.room
        if self.state == "no_agents":
            return f"{credits_shown(room.available)} credits are available for the first agent’s sends."
        if self.state == "ok":
            costliest = self.sends[-1]
            return (
                f"{credits_shown(room.available)} credits are available{_cap_words(room)}; the costliest "
                f"send ({costliest.agent}’s) holds up to {credits_shown(costliest.hold)}."
            )
        why = reason(room, self.refused[0], game=self.game.slug)
        if self.state == "none":
            return why
        return f"Sends to {_names(self.funded)} can be funded; sends to {_names(self.refused)} are refused. {why}"

    def fits_words(self, short_of: str) -> str:
        """What the room leaves by `short_of`'s measure (the credits
        available, or what the cap leaves) funds, for the card that shows
        it: no agent's send, or whose sends and whose not."""
        left = self.room.left_by(short_of)
        fit = [send for send in self.sends if send.hold <= left]
        short = [send for send in self.sends if send.hold > left]
        if not fit:
            return "too little for any agent’s send"
        return f"enough for {_possessive(fit)} sends, not {_possessive(short)}"

    def for_agent(self, name: str) -> Send | None:
        return next((send for send in self.sends if send.agent == name), None)

    def agent_sentence(self, name: str) -> str:
        """An agent's next send, in short, for its page."""
        send = self.for_agent(name)
        if send is None:
            return ""
        room, hold = self.room, f"A send holds up to {credits_shown(send.hold)} credits"
        if send.short_of == SHORT_OF_CAP:
            return f"{hold}; the monthly cap leaves {credits_shown(max(room.cap_left, 0))}."
        return f"{hold}; {credits_shown(max(room.available, 0))} are available{_cap_words(room)}."

    @property
    def fix(self) -> dict | None:
        """The way to lift the refusal, for this reader (None: nothing refused)."""
        if not self.refused:
            return None
        return fix_link(self.game, self.refused[0].short_of, is_operator=self.is_operator)

    def agent_fix(self, name: str) -> dict | None:
        send = self.for_agent(name)
        if send is None or not send.short_of:
            return None
        return fix_link(self.game, send.short_of, is_operator=self.is_operator)


def reason(room: ledger.Room, send: Send, *, game: str) -> str:
    """Why `send` is refused: its real cause, as a 402 names it."""
    return ledger.refusal_said(send.cause, room, hold=send.hold, agent=send.agent, game=game, others=False)


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def _cap_words(room: ledger.Room) -> str:
    if room.cap is None:
        return ""
    return f" and the monthly cap leaves {credits_shown(max(room.cap_left, 0))}"


def _names(sends: list[Send]) -> str:
    names = sorted(send.agent for send in sends)
    shown = ", ".join(names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _possessive(sends: list[Send]) -> str:
    """ "dm’s", "bard’s and dm’s", "a’s, b’s, c’s and 2 more agents’"."""
    names = sorted(send.agent for send in sends)
    if len(names) > 3:
        return ", ".join(f"{name}’s" for name in names[:3]) + f" and {len(names) - 3} more agents’"
    owned = [f"{name}’s" for name in names]
    return owned[0] if len(owned) == 1 else ", ".join(owned[:-1]) + " and " + owned[-1]


def fix_link(game: Game, short_of: str | None, *, is_operator: bool) -> dict:
    """Where a refusal for want of `short_of` (None: credits or the cap) is
    lifted: {"href", "text", "ask"} — a link to the Billing page's form for
    an operator; for anyone else, Billing to look at, and whom to ask."""
    billing = reverse("billing-page", args=[game.slug])
    if is_operator:
        if short_of == SHORT_OF_CREDITS:
            return {"href": billing + "#adjust", "text": "Add credits on Billing", "ask": ""}
        if short_of == SHORT_OF_CAP:
            return {"href": billing + "#monthly-cap", "text": "Raise the monthly cap on Billing", "ask": ""}
        return {"href": billing, "text": "Add credits or raise the cap on Billing", "ask": ""}
    ask = {
        SHORT_OF_CREDITS: "The studio’s operators (its staff users) add credits: ask them for a top-up.",
        SHORT_OF_CAP: "Only the studio’s operators (its staff users) raise the monthly cap: ask them.",
    }.get(short_of, "The studio’s operators (its staff users) add credits and raise caps: ask them.")
    return {"href": billing, "text": "See Billing", "ask": ask}


def game_funding(game: Game, *, is_operator: bool = False) -> Funding:
    """Each of the game's agents' next sends against the game's room now."""
    return game_fundings([game], is_operator=is_operator)[game.pk]


def game_fundings(games, *, is_operator: bool = False, now=None) -> dict[int, Funding]:
    """`game_funding` for several games at once (a list of games), in three
    statements whatever their number: their agents, their models' prices,
    their accounts. By game id. `now`: the time whose month the cap counts
    (the present's by default)."""
    games = {game.pk: game for game in games}
    # A replay's copy takes only its replay's sends, which its replay was funded for.
    agents = list(
        Agent.objects.filter(game_id__in=games, replay_of=None).values_list(
            "game_id", "name", "model", "max_tokens"
        )
    )
    prices = ledger.model_prices({model for _, _, model, _ in agents})
    accounts = {account.game_id: account for account in Account.objects.filter(game_id__in=games)}
    month = now.date().replace(day=1) if now else ledger.this_month()
    fundings = {}
    for game_id, game in games.items():
        account = accounts.get(game_id) or Account(game_id=game_id)
        room = ledger.account_room(account, month=month)
        sends = []
        for _, name, model, max_tokens in (agent for agent in agents if agent[0] == game_id):
            # What the turn slot holds for the send (turn_slot._enqueue).
            hold = ledger.hold_estimate(max_tokens=max_tokens, price=prices[model])
            cause = room.cause(hold)
            sends.append(Send(name, hold, ledger.SHORT_OF[cause] if cause else None, cause))
        sends.sort(key=lambda send: (send.hold, send.agent))
        fundings[game_id] = Funding(game=game, room=room, sends=sends, is_operator=is_operator)
    return fundings
