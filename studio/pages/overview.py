"""A game's overview, the page a designer opens first (/studio/<game>/):
its agents with their last activity, this month's spend against the cap,
whether sends can be funded and when they stop at the rate the game
spends, the turns live now, what failed lately and the sends refused for
money. Each part is read when the template first asks for it."""

from datetime import UTC, datetime
from functools import cached_property
from itertools import chain

from django.db.models import OuterRef, Subquery
from django.utils import timezone

from agents.models import LIVE_STATUSES, Agent, Block, Compaction, CompactionStatus, Turn, TurnStatus
from agents.providers import causes
from billing.budgets import Budget, game_budget
from billing.funding import SHORT_OF_CAP, Funding
from billing.refusals import RecentRefusals, refusals_recent
from studio.models import Game
from studio.pages.helpers import meter

LIVE_TURNS_SHOWN = 20
FAILURES_SHOWN = 10


class GameOverview:
    def __init__(self, game: Game, *, is_operator: bool = False):
        self.game = game
        self.is_operator = is_operator
        self.now = timezone.now()

    @cached_property
    def budget(self) -> Budget:
        return game_budget(self.game, is_operator=self.is_operator, now=self.now)

    @cached_property
    def funding(self) -> Funding:
        return self.budget.funding

    @cached_property
    def refusals(self) -> RecentRefusals:
        """Sends refused for money in the last week, by agent and cause."""
        return refusals_recent(game_id=self.game.pk, now=self.now)

    @cached_property
    def spend(self) -> dict:
        """This month's spend, against the cap when there is one."""
        room = self.funding.room
        month_meter = meter(room.month_spent, room.cap) if room.cap else None
        if month_meter and any(send.short_of == SHORT_OF_CAP for send in self.funding.sends):
            month_meter["state"] = "over"  # what it leaves funds no send
        return {
            "month": f"{self.now:%B %Y}",
            "spent": room.month_spent,
            "cap": room.cap,
            "meter": month_meter,
            "balance": room.balance,
        }

    @cached_property
    def agents(self) -> list[dict]:
        """Each agent, with its newest block (its last activity), newest first."""
        newest = Block.objects.filter(agent=OuterRef("pk")).order_by("-number")
        # Replays' copies are no characters of the game: their replays show them.
        agents = Agent.objects.filter(game=self.game, replay_of=None).annotate(
            last_block_at=Subquery(newest.values("created_at")[:1]),
            last_block_status=Subquery(newest.values("status")[:1]),
        )
        rows = [
            {
                "agent": agent,
                "last_at": agent.last_block_at,
                "last_status": agent.last_block_status,
                "send": self.funding.for_agent(agent.name),
            }
            for agent in agents
        ]
        never = datetime.min.replace(tzinfo=UTC)
        return sorted(rows, key=lambda row: (row["last_at"] or never, row["agent"].name), reverse=True)

    @cached_property
    def live_turns(self) -> list[Turn]:
        return list(
            Turn.objects.filter(agent__game=self.game, agent__replay_of=None, status__in=LIVE_STATUSES)
            .select_related("agent")
            .order_by("id")[:LIVE_TURNS_SHOWN]
        )

    @cached_property
    def failures(self) -> list[dict]:
        """The newest failed turns and compactions, newest first."""
        turns = (
            Turn.objects.filter(agent__game=self.game, agent__replay_of=None, status=TurnStatus.FAILED)
            .select_related("agent")
            .order_by("-id")[:FAILURES_SHOWN]
        )
        compactions = (
            Compaction.objects.filter(
                agent__game=self.game, agent__replay_of=None, status=CompactionStatus.FAILED
            )
            .select_related("agent")
            .order_by("-id")[:FAILURES_SHOWN]
        )
        failures = chain(
            (
                {
                    "what": "turn",
                    "agent": turn.agent.name,
                    "at": turn.created_at,
                    "block": turn.block_number,
                    "code": turn.error_code,
                    "class": causes.label(turn.error_class),
                    "error": turn.error,
                }
                for turn in turns
            ),
            (
                {
                    "what": "compaction",
                    "agent": item.agent.name,
                    "at": item.finished_at or item.created_at,
                    "block": None,
                    "code": "",
                    "class": "",
                    "error": item.error,
                }
                for item in compactions
            ),
        )
        return sorted(failures, key=lambda failure: failure["at"], reverse=True)[:FAILURES_SHOWN]
