"""The one place credits move.

Every charge adds to a cost line and takes the same amount off the game's
balance inside one transaction, with the account row locked so parallel
turns of one game cannot lose an update. Callers make no network call while
a charge's transaction is open.
"""

import uuid
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from django.db import transaction
from django.db.models import F

from studio.errors import PaymentRequired
from studio.models import Game

from .models import Account, Adjustment, CostKind, CostLine, Fee, ModelPrice

SIX_PLACES = Decimal("0.000001")
MILLION = Decimal(1_000_000)
MEMORY_ACCESS = "memory_access"


def credits(value) -> Decimal:
    return Decimal(value).quantize(SIX_PLACES, rounding=ROUND_HALF_UP)


def credits_text(value) -> str:
    return str(credits(value))


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


# --- prices -------------------------------------------------------------------


def model_price(model: str) -> ModelPrice:
    prices = {p.model: p for p in ModelPrice.objects.filter(model__in=[model, "*"])}
    price = prices.get(model) or prices.get("*")
    if price is None:
        return ModelPrice(model=model, input_per_mtok=0, output_per_mtok=0)
    return price


def fee(code: str) -> Decimal:
    row = Fee.objects.filter(code=code).first()
    return row.amount if row else Decimal("0")


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
    account = Account.objects.create(game=game)
    if credits:
        adjustment_post(game=game, amount=credits, reason="Opening credits", made_by="system")
        account.refresh_from_db()
    return account


def balance(game: Game) -> Decimal:
    return Account.objects.filter(game=game).values_list("balance", flat=True).first() or Decimal(0)


def can_pay(game: Game) -> bool:
    return balance(game) > 0


def require_funds(game: Game) -> None:
    if not can_pay(game):
        raise PaymentRequired(
            f"The game '{game.slug}' has no credits left (balance {credits_text(balance(game))}). "
            "An admin can add credits with POST /api/v1/billing/adjustments."
        )


@transaction.atomic
def adjustment_post(*, game: Game, amount, reason: str, made_by: str) -> Adjustment:
    amount = credits(amount)
    adjustment = Adjustment.objects.create(game=game, amount=amount, reason=reason, made_by=made_by)
    Account.objects.filter(game=game).update(balance=F("balance") + amount)
    return adjustment


# --- charges -------------------------------------------------------------------


def _line_add(
    *,
    game_id: int,
    agent_name: str,
    turn_id: uuid.UUID | None,
    kind: str,
    quantity: int,
    amount: Decimal,
    detail: dict,
    compaction_id: uuid.UUID | None = None,
) -> CostLine:
    """Add to the turn's line of this kind (creating it), and take the
    amount off the balance. Must run inside a transaction."""
    # The UPDATE locks the account row first: every charge of a game queues
    # behind it, so two charges to one turn's line cannot both insert it.
    Account.objects.filter(game_id=game_id).update(balance=F("balance") - amount)
    line = None
    if turn_id is not None:
        line = CostLine.objects.select_for_update().filter(turn_id=turn_id, kind=kind).first()
    if line is None:
        return CostLine.objects.create(
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
    line.save(update_fields=["quantity", "amount", "detail", "updated_at"])
    return line


def charge_model_usage(
    *, game_id: int, agent_name: str, turn_id, price: ModelPrice, usage: Usage
) -> CostLine:
    """One model step's tokens at `price`, added to the turn's Model line.
    Runs inside the caller's transaction."""
    with transaction.atomic(savepoint=False):
        return _line_add(
            game_id=game_id,
            agent_name=agent_name,
            turn_id=turn_id,
            kind=CostKind.MODEL,
            quantity=usage.total,
            amount=usage_amount(usage, price),
            detail={
                "model": price.model,
                "calls": 1,
                "inputTokens": usage.input_tokens,
                "outputTokens": usage.output_tokens,
                "cachedInputTokens": usage.cached_input_tokens,
                "inputPerMTok": str(price.input_per_mtok),
                "outputPerMTok": str(price.output_per_mtok),
                "cachedInputPerMTok": str(price.cached_input_per_mtok),
            },
        )


def charge_memory_access(*, game_id: int, agent_name: str, turn_id, fee: Decimal) -> CostLine:
    """One memory tool call, errors included, at `fee`. Runs inside the
    caller's transaction, so the call's effect and its fee commit together."""
    amount = fee
    return _line_add(
        game_id=game_id,
        agent_name=agent_name,
        turn_id=turn_id,
        kind=CostKind.MEMORY_ACCESS,
        quantity=1,
        amount=amount,
        detail={"feeEach": str(amount)},
    )


def turn_lines(turn_id) -> list[CostLine]:
    return list(CostLine.objects.filter(turn_id=turn_id).order_by("id"))


def charge_compaction(*, game_id: int, agent_name: str, compaction_id, model: str, usage: Usage) -> CostLine:
    """One compaction's model tokens, as its own line. Runs inside the
    caller's transaction (the one that installs the checkpoint), so a
    compaction that does not land is not charged, and one that is retried
    is charged once. It is charged even past a zero balance: compactions
    keep an agent inside its window."""
    price = model_price(model)
    return _line_add(
        game_id=game_id,
        agent_name=agent_name,
        turn_id=None,
        compaction_id=compaction_id,
        kind=CostKind.COMPACTION,
        quantity=usage.total,
        amount=usage_amount(usage, price),
        detail={
            "model": model,
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "cachedInputTokens": usage.cached_input_tokens,
            "inputPerMTok": str(price.input_per_mtok),
            "outputPerMTok": str(price.output_per_mtok),
        },
    )
