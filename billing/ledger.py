"""The one place credits move.

Every charge adds to a cost line and takes the same amount off the game's
balance inside one transaction, with the account row locked so parallel
turns of one game cannot lose an update. Callers make no network call while
a charge's transaction is open.
"""

import difflib
import logging
import uuid
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from functools import cache

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Round
from django.utils import timezone

from agents.providers.base import Usage
from studio.errors import DomainError
from studio.live import event_types
from studio.live.events import publish_game_event_on_commit
from studio.models import Game
from studio.ops import metrics
from studio.runtime import sql

from . import alerts, money
from .models import Account, Adjustment, CostKind, CostLine, Fee, ModelPrice
from .money import SIX_PLACES, credits, credits_apart, credits_shown, credits_text  # noqa: F401 (the ledger's words)
from .refusals import (  # noqa: F401 (what a refusal says, by the ledger's names)
    OPERATORS,
    SHORT_OF,
    SHORT_OF_CAP,
    SHORT_OF_CREDITS,
    MoneyRefused,
    RefusalCause,
    refusal_advice,
    refusal_said,
)

log = logging.getLogger(__name__)

MILLION = Decimal(1_000_000)
MEMORY_ACCESS = "memory_access"
# budget.low is sent once this share of the monthly cap is spent.
LOW_SHARE = Decimal("0.8")


class NotCovered(Exception):
    """A charge made on condition that the game still covers every hold
    after it, when it does not (`TurnBill.settle(must_cover=True)`)."""


class GameBusy(DomainError):
    """A send past the game's live-turn quota (STUDIO_MAX_LIVE_TURNS_PER_GAME)."""

    status = 429
    code = "game_busy"


# --- prices -------------------------------------------------------------------


def model_has_price(model: str) -> bool:
    """Whether `model` has a price row of its own (the `*` row aside)."""
    return ModelPrice.objects.filter(model=model).exists()


# How many priced models a refusal compares an unpriced name with: the
# operator's table, small in practice, is read this far at most.
PRICED_MODELS_COMPARED = 1000
# How alike two names must be (difflib's ratio) to suggest one for the
# other: a dropped or swapped character or two in a model's name.
PRICED_NEAR_CUTOFF = 0.85


def model_priced_near(model: str) -> str | None:
    """The priced model whose name is closest to `model`, when one is close
    enough to be what was meant ('openai:gpt4o-mini' for
    'openai:gpt-4o-mini'); None otherwise. Case is ignored."""
    priced = ModelPrice.objects.exclude(model__in=["*", model]).order_by("model")
    names = {name.lower(): name for name in priced.values_list("model", flat=True)[:PRICED_MODELS_COMPARED]}
    near = difflib.get_close_matches(model.lower(), list(names), n=1, cutoff=PRICED_NEAR_CUTOFF)
    return names[near[0]] if near else None


def model_price(model: str) -> ModelPrice:
    prices = {p.model: p for p in ModelPrice.objects.filter(model__in=[model, "*"])}
    price = prices.get(model) or prices.get("*")
    if price is None:
        return ModelPrice(model=model, input_per_mtok=0, output_per_mtok=0)
    return price


def model_prices(models) -> dict[str, ModelPrice]:
    """`model_price` of each of `models`, in one statement."""
    rows = {p.model: p for p in ModelPrice.objects.filter(model__in=[*models, "*"])}
    return {
        model: rows.get(model)
        or rows.get("*")
        or ModelPrice(model=model, input_per_mtok=0, output_per_mtok=0)
        for model in models
    }


def fee(code: str) -> Decimal:
    row = Fee.objects.filter(code=code).first()
    return row.amount if row else Decimal("0")


@dataclass(frozen=True)
class Rates:
    """What a turn is charged at: its model's price and the memory access
    fee, read once, when the turn is queued."""

    price: ModelPrice
    memory_access: Decimal


def rates_sql(model: str) -> tuple[str, list]:
    """Two columns (and their parameters) that another statement can select
    to read a turn's rates with it instead of in statements of their own:
    the price of `model` (or of `*`) as text, its row's name last, and the
    memory access fee.
    `rates_read` makes `Rates` of the two values."""
    # Speed: 2 statements per send (rates read inside the agent's lock); guarded by bench/send_overhead.py (statements per send).
    price = (
        "(SELECT input_per_mtok || ' ' || output_per_mtok || ' ' || cached_input_per_mtok || ' ' || model "
        f"FROM {ModelPrice._meta.db_table} WHERE model IN (%s, '*') ORDER BY model = '*' LIMIT 1)"
    )
    fee_amount = f"(SELECT amount FROM {Fee._meta.db_table} WHERE code = %s)"
    return f"{price}, {fee_amount}", [model, MEMORY_ACCESS]


def rates_read(model: str, price_text: str | None, fee_amount) -> Rates:
    if price_text is None:
        price = ModelPrice(model=model, input_per_mtok=0, output_per_mtok=0)
    else:
        *values, row = price_text.split(" ", 3)
        values = [credits(value) for value in values]
        price = ModelPrice(
            model=row, input_per_mtok=values[0], output_per_mtok=values[1], cached_input_per_mtok=values[2]
        )
    return Rates(price, _decimal(fee_amount) if fee_amount is not None else Decimal(0))


def usage_amount(usage: Usage, price: ModelPrice) -> Decimal:
    uncached = max(usage.input_tokens - usage.cached_input_tokens, 0)
    raw = (
        uncached * price.input_per_mtok
        + usage.cached_input_tokens * price.cached_input_per_mtok
        + usage.output_tokens * price.output_per_mtok
    ) / MILLION
    return credits(raw)


# --- accounts -------------------------------------------------------------------


def account_open(*, game: Game, credits=0) -> Account:
    """A new game's account, opened with `credits` (an adjustment by the
    system, as any credits in are): written with its balance, as no charge
    or adjustment can come before it."""
    opening = money.credits(credits)
    account = Account.objects.create(game=game, balance=opening)
    if opening:
        Adjustment.objects.create(game=game, amount=opening, reason="Opening credits", made_by="system")
    return account


def balance(game: Game) -> Decimal:
    return Account.objects.filter(game=game).values_list("balance", flat=True).first() or Decimal(0)


def this_month() -> date:
    return timezone.now().date().replace(day=1)


def hold_estimate(*, max_tokens: int, price: ModelPrice) -> Decimal:
    """The most one model call of an agent can cost: a full context in,
    the most a reply may be out. What a send reserves before it runs."""
    usage = Usage(input_tokens=max_tokens, output_tokens=settings.STUDIO["MODEL_MAX_OUTPUT_TOKENS"])
    return max(usage_amount(usage, price), SIX_PLACES)


@dataclass(frozen=True)
class Room:
    """What a game's account leaves for a new hold: the balance less every
    hold (`available`), and what the monthly cap leaves of the month with
    every hold counted (`cap_left`; None without a cap) — the rule
    `hold_take` refuses by, and `_fits` writes in SQL."""

    balance: Decimal
    held: Decimal
    month_spent: Decimal
    cap: Decimal | None

    @property
    def available(self) -> Decimal:
        return self.balance - self.held

    @property
    def cap_left(self) -> Decimal | None:
        return None if self.cap is None else self.cap - self.month_spent - self.held

    def cause(self, hold: Decimal) -> str | None:
        """The `RefusalCause` that stops a hold of `hold` now, or None when
        it fits."""
        if self.available < hold:
            return RefusalCause.BALANCE_EXHAUSTED if self.available <= 0 else RefusalCause.HOLD_OVER_BALANCE
        if self.cap_left is not None and self.cap_left < hold:
            return RefusalCause.CAP_REACHED if self.cap_left <= 0 else RefusalCause.HOLD_OVER_CAP
        return None

    def short_of(self, hold: Decimal) -> str | None:
        """What stops a hold of `hold` now: SHORT_OF_CREDITS, SHORT_OF_CAP,
        or None when it fits."""
        cause = self.cause(hold)
        return SHORT_OF[cause] if cause else None

    def left_by(self, short_of: str) -> Decimal:
        """What the room leaves by one measure, SHORT_OF_CREDITS (the
        balance less every hold) or SHORT_OF_CAP (what the cap leaves);
        never below zero."""
        left = self.available if short_of == SHORT_OF_CREDITS else self.cap_left
        return max(left, Decimal(0))

    def left_for(self, cause: str) -> Decimal:
        """What the room leaves by the measure `cause` is about."""
        return self.left_by(SHORT_OF[cause])


def account_room(account: Account, *, month: date | None = None) -> Room:
    month = month or this_month()
    return Room(
        balance=account.balance,
        held=account.held,
        month_spent=account.month_spent if account.month == month else Decimal(0),
        cap=account.monthly_cap,
    )


def game_room(game: Game) -> Room:
    return account_room(Account.objects.get(game=game))


def hold_take(
    *, game: Game, amount: Decimal, also: tuple[str, list] | None = None, agent: str = ""
) -> tuple | None:
    """Reserve `amount` for a turn (a send to `agent`), or refuse before
    anything runs (`MoneyRefused`, with its real cause): 402
    `budget_exhausted` when the balance less what running turns hold cannot
    cover it, 402 `spend_cap_reached` when the month's spend (with holds)
    would pass the game's monthly cap.

    Holding a worst case per running turn is what keeps parallel sends of
    one game from spending credits that are not there.

    The hold is a new turn's: the account counts it among its live turns,
    and refuses it with 429 `game_busy` when STUDIO_MAX_LIVE_TURNS_PER_GAME
    are live already (running, queued, or ended with a model call still to
    be charged) — so one game cannot take every thread and connection the
    studio shares.

    `also`: columns (SQL, parameters) to read in the hold's statement; their
    values are returned. Like any statement, it sees what was committed
    before it started — so after the locks its caller already holds."""
    # Speed: a locked read per hold (lock, check, hold in one UPDATE); guarded by bench/send_overhead.py (statements per send).
    row = _hold(game_id=game.pk, amount=amount, also=also, new_turn=True)
    if row is not None:
        return row[1:] if also else None
    month = this_month()
    with transaction.atomic(savepoint=False):
        account = Account.objects.select_for_update().get(game=game)
        most = settings.STUDIO["MAX_LIVE_TURNS_PER_GAME"]
        if account.live_turns >= most:
            raise GameBusy(
                f"The game '{game.slug}' already has {most} turns live across its agents (running, "
                "queued, or with a model call still to be charged), the most a game may have "
                "(STUDIO_MAX_LIVE_TURNS_PER_GAME); try again when some have ended.",
                retry_after=2,
            )
        room = account_room(account, month=month)
        cause = room.cause(amount)
        if cause:
            said = refusal_said(cause, room, hold=amount, agent=agent, game=game.slug)
            raise MoneyRefused(cause, said=said, agent=agent, hold=amount, left=room.left_for(cause))
        # It fits now (another turn ended meanwhile): hold it.
        account.held += amount
        account.live_turns += 1
        account.save(update_fields=["held", "live_turns", "updated_at"])
    if also:
        return sql.one(f"SELECT {also[0]}", also[1])
    return None


def hold_fits(*, game_id: int, amount: Decimal) -> bool:
    """Hold `amount` more if the game can cover it, in one statement that
    locks the account row, checks the balance and the monthly cap (with
    every hold counted) and holds. False when it does not fit (or the game
    has no account). With `amount` 0 it is the check alone: the balance
    still covers every hold, and the month's spend with them fits the cap —
    what a turn asks before each model call after its first."""
    return _hold(game_id=game_id, amount=amount) is not None


def _money(expression: str) -> str:
    """`expression`, a sum of credits in SQL, as exact as the columns: on
    SQLite, whose arithmetic on decimals is in floats (100 + -99.9902 is
    0.00979999…), rounded to their six places, so a write stores what a
    decimal would and a comparison at the boundary holds."""
    return f"ROUND({expression}, 6)" if _on_sqlite() else expression


@cache
def _on_sqlite() -> bool:
    return connection.vendor == "sqlite"  # one backend per process


def _fits(amount: Decimal) -> tuple[str, list]:
    """The condition (SQL, parameters) on an account row that it can hold
    `amount` more: the balance covers every hold with it, and the month's
    spend with every hold fits the cap."""
    ops = connection.ops
    a, m = ops.adapt_decimalfield_value(amount), ops.adapt_datefield_value(this_month())
    return (
        f"balance >= {_money('held + %s')} AND (monthly_cap IS NULL OR "
        f"monthly_cap >= {_money('(CASE WHEN month = %s THEN month_spent ELSE 0 END) + held + %s')})",
        [a, m, a],
    )


def _hold(
    *, game_id: int, amount: Decimal, also: tuple[str, list] | None = None, new_turn: bool = False
) -> tuple | None:
    """`hold_fits`'s statement: a row (1, then `also`'s values) when it held.
    With `new_turn`, the hold is a new turn's: counted, within the game's
    live-turn quota."""
    fits, fits_params = _fits(amount)
    columns, params = also or ("", [])
    turns, quota, quota_params = "", "", []
    if new_turn:
        turns, quota = ", live_turns = live_turns + 1", " AND live_turns < %s"
        quota_params = [settings.STUDIO["MAX_LIVE_TURNS_PER_GAME"]]
    return sql.one(
        f"UPDATE {Account._meta.db_table} SET held = {_money('held + %s')}{turns} "
        f"WHERE game_id = %s AND {fits}{quota} "
        f"RETURNING 1{', ' if columns else ''}{columns}",
        [connection.ops.adapt_decimalfield_value(amount), game_id, *fits_params, *quota_params, *params],
    )


def turn_room(*, game_id: int, turn_held: Decimal) -> Decimal:
    """The most a running turn's next model call may cost: what the turn
    holds (`turn_held`), as far as the balance and the monthly cap still
    back it once every other hold is counted; never below zero."""
    account = Account.objects.filter(game_id=game_id).first()
    if account is None:
        return Decimal(0)
    room = account_room(account)
    others = room.held - turn_held
    most = min(turn_held, room.balance - others)
    if room.cap is not None:
        most = min(most, room.cap - room.month_spent - others)
    return max(most, Decimal(0))


def hold_covered(*, game_id: int, amount: Decimal) -> bool:
    """Whether the game could hold `amount` more now (`hold_fits`'s check,
    holding nothing)."""
    fits, params = _fits(amount)
    return (
        sql.one(f"SELECT 1 FROM {Account._meta.db_table} WHERE game_id = %s AND {fits}", [game_id, *params])
        is not None
    )


def hold_release(*, game_id: int, amount: Decimal, turn_ends: bool = False) -> None:
    """Give back a hold that owes nothing more (`turn_ends`: the last of
    its turn's). Runs inside the caller's transaction."""
    account_debit(game_id=game_id, amount=Decimal(0), release=amount, turn_ends=turn_ends)


@transaction.atomic
def adjustment_post(*, game: Game, amount, reason: str, made_by: str) -> Adjustment:
    """Credits in (or, negative, out), kept with who made it and why. Only
    the studio's operators make adjustments — staff users on the billing
    page or in the admin, and `manage.py adjustcredits` — never an API key:
    its callers check that."""
    amount = credits(amount)
    adjustment = Adjustment.objects.create(game=game, amount=amount, reason=reason, made_by=made_by)
    # A refusal after this one starts the game's refusals again (billing.refusals).
    balance = F("balance") + amount
    if _on_sqlite():  # as `_money` says
        balance = Round(balance, 6, output_field=Account._meta.get_field("balance"))
    Account.objects.filter(game=game).update(balance=balance, refused_at=None)
    # Back at or above the alert: the next fall below it is announced again.
    Account.objects.filter(game=game, low_balance_warned=True, balance__gte=F("low_balance_alert")).update(
        low_balance_warned=False
    )
    return adjustment


# --- charges -------------------------------------------------------------------
#
# A charge is two writes in the caller's transaction: its cost line (added
# to, or created), and the game's account (balance down, month's spend up).
# The account write locks the row until the transaction commits, queueing
# every other charge of the game behind it — so it is one UPDATE, made last
# in the transaction (`account_debit`), for all the charges of that
# transaction together and the hold a turn gives back when it ends.


def _line_add(
    *,
    line: CostLine | None,
    game_id: int,
    agent_name: str,
    turn_id: uuid.UUID | None,
    kind: str,
    quantity: int,
    amount: Decimal,
    detail: dict,
    compaction_id: uuid.UUID | None = None,
) -> CostLine:
    """Add to `line` (a running turn is its lines' only writer, so it keeps
    them), or make it when None; the caller saves it, inside its
    transaction."""
    if amount:
        _count_on_commit(kind, amount)
    if line is None:
        return CostLine(
            game_id=game_id,
            agent_name=agent_name,
            turn_id=turn_id,
            compaction_id=compaction_id,
            kind=kind,
            label=CostKind(kind).label,
            quantity=quantity,
            amount=amount,
            detail=detail,
        )
    line.quantity += quantity
    line.amount += amount
    for key, value in detail.items():
        line.detail[key] = line.detail.get(key, 0) + value if isinstance(value, int) else value
    return line


def _lines_save(lines: list[CostLine]) -> None:
    """Save `lines`, the new ones in one INSERT (written out, as every turn
    does it: studio/runtime/sql.py says why)."""
    # Speed: ORM statement building (studio/runtime/sql.py); guarded by bench/agent_server.py (server CPU per message).
    new = [line for line in lines if line.pk is None]
    if new:
        sql.insert(*new)
    for line in lines:
        if not any(line is made for made in new):
            line.updated_at = timezone.now()
            changed = {name: getattr(line, name) for name in ("quantity", "amount", "detail", "updated_at")}
            sql.update(CostLine, {"pk": line.pk}, changed)


def _count_on_commit(kind: str, amount: Decimal) -> None:
    """Count the charge once its transaction commits (a rolled-back step
    charged nothing)."""
    kind = str(kind)
    transaction.on_commit(lambda: metrics.credits_charged(kind, amount))


@dataclass(frozen=True)
class Debited:
    """What `account_debit` did: whether, after it, the balance still
    covers every hold and the month's spend with them fits the cap (what
    `hold_fits` checks with nothing more to hold), and what of the amount
    it wrote off — more than the balance had left, which is never taken."""

    covers: bool
    written_off: Decimal = Decimal(0)


def account_debit(
    *,
    game_id: int,
    amount: Decimal,
    release: Decimal = Decimal(0),
    agent_name: str = "",
    turn_ends: bool = False,
) -> Debited | None:
    """Take `amount` off the game's balance and add it to the month's spend
    (a new month starts from zero), and give back `release` of what its
    turns hold (`turn_ends`: a turn's last, so one live turn fewer) — one
    UPDATE, which locks the account row until the caller's transaction
    ends: make it the transaction's last write. Sends `budget.low` the
    first time in a month the spend passes 80% of the cap.

    The balance never goes below zero: a charge past what it has left (a
    provider that counted more tokens than the turn held for) takes what
    is left and writes off the rest, for the caller to take off its cost
    lines. None when there was nothing to write (or no account)."""
    if not amount and not release and not turn_ends:
        return None
    row = _debit(game_id, amount, release, turn_ends, within_balance=bool(amount))
    written_off = Decimal(0)
    if row is None and amount:
        # Past the balance: a second statement, only then.
        balance = (
            Account.objects.select_for_update()
            .filter(game_id=game_id)
            .values_list("balance", flat=True)
            .first()
        )
        if balance is None:
            return None
        taken = min(amount, max(balance, Decimal(0)))
        row, written_off = _debit(game_id, taken, release, turn_ends), amount - taken

        def said():
            metrics.credits_written_off(written_off)
            log.warning(
                "game %s: a charge of %s passed its balance (%s): %s written off (agent %s)",
                game_id,
                amount,
                balance,
                written_off,
                agent_name or "-",
            )

        transaction.on_commit(said)
    if row is None:
        return None
    month = this_month()
    cap = _decimal(row[0]) if row[0] is not None else None
    spent, warned, left, held = _decimal(row[1]), row[2], _decimal(row[3]), _decimal(row[4])
    if cap and spent >= cap * LOW_SHARE and str(warned) != str(month):
        _budget_low(game_id=game_id, month=month, cap=cap, spent=spent, left=left, agent_name=agent_name)
    alert, alert_sent = row[5], row[6]
    if amount and alert is not None and not alert_sent and left < _decimal(alert):
        _balance_low(game_id=game_id, alert=_decimal(alert), left=left, agent_name=agent_name)
    return Debited(covers=left >= held and (cap is None or spent + held <= cap), written_off=written_off)


def _debit(game_id: int, amount: Decimal, release: Decimal, turn_ends: bool, *, within_balance: bool = False):
    """`account_debit`'s statement: the account's row after it (None when
    it has none, or, `within_balance`, when its balance is under `amount`)."""
    # Speed: a locked read and write per charge (one UPDATE per transaction); guarded by bench/send_overhead.py (statements per send).
    month = this_month()
    ops = connection.ops
    amount_value = ops.adapt_decimalfield_value(amount)
    within, within_params = (" AND balance >= %s", [amount_value]) if within_balance else ("", [])
    return sql.one(
        f"UPDATE {Account._meta.db_table} SET "
        f"balance = {_money('balance - %s')}, "
        f"month_spent = CASE WHEN month = %s THEN {_money('month_spent + %s')} ELSE %s END, "
        # Never below zero, whatever the count was (checkledger tells a drift).
        f"month = %s, held = {_money('held - %s')}, "
        "live_turns = CASE WHEN live_turns > %s THEN live_turns - %s ELSE 0 END, updated_at = %s "
        f"WHERE game_id = %s{within} RETURNING monthly_cap, month_spent, low_warned_month, balance, held, "
        "low_balance_alert, low_balance_warned",
        [
            amount_value,
            ops.adapt_datefield_value(month),
            amount_value,
            amount_value,
            ops.adapt_datefield_value(month),
            ops.adapt_decimalfield_value(release),
            int(turn_ends),
            int(turn_ends),
            ops.adapt_datetimefield_value(timezone.now()),
            game_id,
            *within_params,
        ],
    )


def _write_off(lines: list[CostLine], amount: Decimal) -> list[CostLine]:
    """Take `amount` (what `account_debit` wrote off) off `lines`, the Model
    line first, each keeping what it lost as `writtenOff` in its detail:
    the lines say what the game paid. The lines changed."""
    changed = []
    for line in lines_in_order(lines):
        if amount <= 0:
            break
        off = min(line.amount, amount)
        if off <= 0:
            continue
        line.amount -= off
        line.detail["writtenOff"] = str(credits(Decimal(line.detail.get("writtenOff", 0)) + off))
        amount -= off
        changed.append(line)
    return changed


def _budget_low(*, game_id: int, month: date, cap: Decimal, spent: Decimal, left: Decimal, agent_name: str):
    # Once a month: only the charge whose update flips low_warned_month sends it.
    if (
        not Account.objects.filter(game_id=game_id)
        .exclude(low_warned_month=month)
        .update(low_warned_month=month)
    ):
        return
    _budget_low_send(
        game_id,
        event_types.budget_low_cap(
            agent=agent_name or None,
            monthly_cap=credits_text(cap),
            month_spent=credits_text(spent),
            balance=credits_text(left),
        ),
    )


def _balance_low(*, game_id: int, alert: Decimal, left: Decimal, agent_name: str):
    """`budget.low` for a charge that took the balance below the game's
    low-balance alert: once, until an adjustment takes it back above."""
    # The caller's UPDATE holds the account's row lock, so one charge flips it.
    if not Account.objects.filter(game_id=game_id, low_balance_warned=False).update(low_balance_warned=True):
        return
    _budget_low_send(
        game_id,
        event_types.budget_low_balance(
            agent=agent_name or None, low_balance_alert=credits_text(alert), balance=credits_text(left)
        ),
    )


def _budget_low_send(game_id: int, event: dict) -> None:
    """To the game's agents' streams once the charge commits, and to the
    game's webhook and e-mail: deliveries made in the charge's transaction
    (so a crash loses none), tried once it commits."""
    publish_game_event_on_commit(game_id, event)
    alerts.alert_raise(
        game_id=game_id, event=event["type"], data={k: v for k, v in event.items() if k != "type"}
    )


def _decimal(value) -> Decimal:
    """A numeric column as raw SQL returns it (SQLite may give a float)."""
    return credits(value if isinstance(value, Decimal) else Decimal(str(value)))


def _usage_detail(price: ModelPrice, usage: Usage, *, model: str | None = None) -> dict:
    """What a model call's line keeps of it: the counts behind its quantity
    and the prices it was charged at (added up call by call)."""
    return {
        "model": model or price.model,
        "calls": 1,
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cachedInputTokens": usage.cached_input_tokens,
        "inputPerMTok": str(price.input_per_mtok),
        "outputPerMTok": str(price.output_per_mtok),
        "cachedInputPerMTok": str(price.cached_input_per_mtok),
    }


@dataclass
class TurnBill:
    """What a running turn has been charged: its cost lines by kind (the
    turn is their only writer) and what is owed on them and not yet taken
    off the balance. Charges add to a line; `settle` saves the lines and
    takes what is owed, last in the caller's transaction."""

    game_id: int
    agent_name: str
    turn_id: uuid.UUID
    lines: dict = field(default_factory=dict)
    owed: Decimal = Decimal(0)
    # From the last settle: whether the game still covers every hold (its
    # answer to `hold_fits` with nothing more to hold); None: not known.
    covers_holds: bool | None = None
    unsaved: set = field(default_factory=set)  # kinds of the lines changed since the last settle

    def _add(self, kind: str, quantity: int, amount: Decimal, detail: dict) -> None:
        self.unsaved.add(kind)
        self.lines[kind] = _line_add(
            line=self.lines.get(kind),
            game_id=self.game_id,
            agent_name=self.agent_name,
            turn_id=self.turn_id,
            kind=kind,
            quantity=quantity,
            amount=amount,
            detail=detail,
        )
        self.owed += amount

    def model_usage(self, price: ModelPrice, usage: Usage) -> None:
        """One model step's tokens at `price`, on the Model line."""
        self._add(CostKind.MODEL, usage.total, usage_amount(usage, price), _usage_detail(price, usage))

    def memory_access(self, fee: Decimal) -> None:
        """One memory tool call, errors included, at `fee`."""
        self._add(CostKind.MEMORY_ACCESS, 1, fee, {"feeEach": str(fee)})

    def settle(
        self, *, release: Decimal = Decimal(0), turn_ends: bool = False, must_cover: bool = False
    ) -> None:
        """Save the lines charged to, then take what is owed off the
        balance, giving back `release` of the hold with it (`turn_ends`:
        all that is left of it): the transaction's last writes.

        `must_cover`: what is owed is only owed if, after it, the balance
        still covers every hold and the month's spend with them fits the
        cap; if not, `NotCovered` is raised, for the caller to roll its
        transaction back (the debit with it) and charge nothing of it."""
        changed = [self.lines[kind] for kind in self.unsaved]
        _lines_save(changed)
        self.unsaved.clear()
        debited = account_debit(
            game_id=self.game_id,
            amount=self.owed,
            release=release,
            agent_name=self.agent_name,
            turn_ends=turn_ends,
        )
        self.owed = Decimal(0)
        self.covers_holds = debited.covers if debited is not None else None
        if debited is not None and debited.written_off:
            _lines_save(_write_off(changed, debited.written_off))
        if must_cover and self.covers_holds is False:
            raise NotCovered()

    def reload(self) -> None:
        """Forget what a rolled-back transaction charged: the lines as the
        database has them, nothing owed (every committed transaction
        settled its own)."""
        self.lines = {line.kind: line for line in CostLine.objects.filter(turn_id=self.turn_id)}
        self.owed = Decimal(0)
        self.covers_holds = None
        self.unsaved.clear()

    def cost_lines(self) -> list[CostLine]:
        return list(self.lines.values())


LINE_ORDER = {kind: index for index, kind in enumerate(CostKind.values)}


def lines_in_order(lines) -> list[CostLine]:
    """Lines in a stable order: Model, Memory access, Compaction."""
    return sorted(lines, key=lambda line: LINE_ORDER.get(line.kind, len(LINE_ORDER)))


def lines_by_turn(turn_ids) -> dict:
    """The lines of several turns at once: turn id → lines in order."""
    grouped: dict = {}
    for line in CostLine.objects.filter(turn_id__in=list(turn_ids)):
        grouped.setdefault(line.turn_id, []).append(line)
    return {turn_id: lines_in_order(lines) for turn_id, lines in grouped.items()}


def turn_lines(turn_id) -> list[CostLine]:
    return lines_in_order(CostLine.objects.filter(turn_id=turn_id))


def cost_lines_prune(*, game_id: int, line_ids: list[int]) -> int:
    """Delete these cost lines of the game, carrying their sum forward on
    its account in the same transaction (`Account.pruned_spend`), so the
    ledger balances at every moment. Lines another prune holds are left
    to it. How many were deleted."""
    with transaction.atomic():
        # The lines before the account, as a turn's charge takes them.
        held = CostLine.objects.select_for_update(skip_locked=True).filter(game_id=game_id, pk__in=line_ids)
        lines = list(held.values_list("pk", "amount"))
        if not lines:
            return 0
        CostLine.objects.filter(pk__in=[pk for pk, _ in lines]).delete()
        spent = sum((amount for _, amount in lines), Decimal(0))
        Account.objects.filter(game_id=game_id).update(pruned_spend=F("pruned_spend") + spent)
    return len(lines)


def charge_compaction(
    *,
    game_id: int,
    agent_name: str,
    compaction_id,
    model: str,
    usage: Usage | None,
    release: Decimal = Decimal(0),
) -> None:
    """One attempt of a compaction: its model tokens added to the
    compaction's one Compaction line (a retried compaction pays for every
    attempt the provider billed), and its hold given back. Runs inside the
    caller's transaction, as its last write."""
    amount = Decimal(0)
    if usage is not None:
        price = model_price(model)
        amount = usage_amount(usage, price)
        line = CostLine.objects.filter(compaction_id=compaction_id, kind=CostKind.COMPACTION).first()
        line = _line_add(
            line=line,
            game_id=game_id,
            agent_name=agent_name,
            turn_id=None,
            compaction_id=compaction_id,
            kind=CostKind.COMPACTION,
            quantity=usage.total,
            amount=amount,
            detail=_usage_detail(price, usage, model=model),
        )
        line.save()
    debited = account_debit(game_id=game_id, amount=amount, release=release, agent_name=agent_name)
    if debited is not None and debited.written_off:
        _write_off([line], debited.written_off)
        line.save()


KEEP = object()  # a limit `limits_set` is not asked to change


@transaction.atomic
def limits_set(*, game: Game, monthly_cap=KEEP, low_balance_alert=KEEP, by_staff: bool = False) -> Account:
    """Set the game's monthly spend cap and its low-balance alert (None:
    none); what is not given is kept. A game's own admins may set a cap
    where there is none or lower it, as a budget owner would; raising or
    removing one is for the studio's operators (`by_staff`): else 403
    `forbidden`."""
    account = Account.objects.select_for_update().get(game=game)
    # A refusal after this one starts the game's refusals again (billing.refusals).
    account.refused_at = None
    changed = ["updated_at", "refused_at"]
    if monthly_cap is not KEEP:
        cap = credits(monthly_cap) if monthly_cap is not None else None
        if not by_staff:
            _cap_change_check(game, now=account.monthly_cap, asked=cap)
        account.monthly_cap = cap
        changed.append("monthly_cap")
    if low_balance_alert is not KEEP:
        alert = credits(low_balance_alert) if low_balance_alert is not None else None
        if alert != account.low_balance_alert:
            # A new threshold: its first crossing is announced.
            account.low_balance_alert, account.low_balance_warned = alert, False
            changed += ["low_balance_alert", "low_balance_warned"]
    account.save(update_fields=changed)
    return account


def _cap_change_check(game: Game, *, now: Decimal | None, asked: Decimal | None) -> None:
    """Refuse a cap change only an operator may make: raising or removing one."""
    if now is None or (asked is not None and asked <= now):
        return
    raise DomainError(
        f"{OPERATORS} raise or remove a game's monthly cap; ask them. A game's admins can set a cap "
        f"where there is none, or lower it: '{game.slug}' has a cap of {credits_shown(now)} credits.",
        status=403,
        code="forbidden",
    )


def account_summary(game: Game) -> dict:
    account = Account.objects.get(game=game)
    month_spent = account.month_spent if account.month == this_month() else Decimal(0)
    return {
        "balance": credits_text(account.balance),
        "held": credits_text(account.held),
        "available": credits_text(account.balance - account.held),
        "monthlyCap": credits_text(account.monthly_cap) if account.monthly_cap is not None else None,
        "monthSpent": credits_text(month_spent),
        "lowBalanceAlert": (
            credits_text(account.low_balance_alert) if account.low_balance_alert is not None else None
        ),
    }


@dataclass(frozen=True)
class LedgerCheck:
    game: str
    balance: Decimal
    expected: Decimal
    held: Decimal
    expected_held: Decimal
    live_turns: int = 0
    expected_live_turns: int = 0

    @property
    def is_consistent(self) -> bool:
        return (
            self.balance == self.expected
            and self.held == self.expected_held
            and self.live_turns == self.expected_live_turns
            and self.balance >= 0
        )


def ledger_check() -> list[LedgerCheck]:
    """For every game: the balance against credits in less cost lines out
    (those pruned counted by their sum; never below zero), what is held against the holds of live turns,
    of ended turns whose last model call is not charged yet and of
    compactions' model calls, and the live turns counted against those
    turns."""
    from django.db.models import Count, Q, Sum

    from agents.models import LIVE_STATUSES, Compaction, Turn

    def sums(queryset, field, key):
        # To the cent's millionth every amount has: SQLite adds decimals as
        # floating point, which leaves a drift of 1e-15 no ledger has.
        totals = queryset.values_list(key).annotate(total=Sum(field)).values_list(key, "total")
        return {group: credits(total) for group, total in totals}

    credited = sums(Adjustment.objects.all(), "amount", "game_id")
    spent = sums(CostLine.objects.all(), "amount", "game_id")
    holding_turns = Turn.objects.filter(Q(status__in=LIVE_STATUSES) | Q(open_call_tokens__isnull=False))
    holding = sums(holding_turns, "held", "agent__game_id")
    for game_id, held in sums(Compaction.objects.filter(held__gt=0), "held", "agent__game_id").items():
        holding[game_id] = holding.get(game_id, Decimal(0)) + held
    counted = dict(
        holding_turns.values_list("agent__game_id").annotate(n=Count("id")).values_list("agent__game_id", "n")
    )
    return [
        LedgerCheck(
            game=account.game.slug,
            balance=account.balance,
            expected=credited.get(account.game_id, Decimal(0))
            - spent.get(account.game_id, Decimal(0))
            - account.pruned_spend,
            held=account.held,
            expected_held=holding.get(account.game_id) or Decimal(0),
            live_turns=account.live_turns,
            expected_live_turns=counted.get(account.game_id, 0),
        )
        for account in Account.objects.select_related("game").order_by("game__slug")
    ]
