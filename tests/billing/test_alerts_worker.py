"""A budget alert delivered by a real Celery worker (a subprocess) over
this machine's Redis: the receiver answers 500, then 200, and the task
tries again after its backoff."""

import uuid

import pytest
from django.conf import settings
from django.db import transaction

from billing import alerts, ledger
from billing.models import AlertDelivery, DeliveryStatus
from tests.conftest import wait_for
from tests.support.webhooks import Receiver
from tests.support.worker import Worker

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL) for the Celery broker"),
]


@pytest.fixture
def start_worker(tmp_path, studio_conf, settings):
    """A real Celery worker on a queue of this test's own (as tests/agents'),
    which alerts are sent to; stopped after the test."""
    studio_conf(COMPACTION_RUNNER="celery")
    settings.CELERY_TASK_DEFAULT_QUEUE = f"test-{uuid.uuid4().hex[:12]}"
    workers = []

    def _start(**env):
        workers.append(Worker(tmp_path / "worker.log", settings.CELERY_TASK_DEFAULT_QUEUE, **env))
        return workers[-1]

    yield _start
    for worker in workers:
        worker.stop()


def test_a_worker_delivers_budget_low_trying_again_after_a_500(start_worker, studio_conf, game):
    studio_conf(WEBHOOK_ALLOW_PRIVATE=True)
    receiver = Receiver(answers=[500, 200])
    try:
        receiver.secret = alerts.webhook_set(game=game, url=receiver.url)
        start_worker(STUDIO_WEBHOOK_ALLOW_PRIVATE="1", STUDIO_ALERT_RETRY_SECONDS="0.2")

        with transaction.atomic():
            ledger.limits_set(game=game, low_balance_alert=200)
            ledger.account_debit(game_id=game.pk, amount=ledger.credits("0.5"), agent_name="dm")

        wait_for(lambda: AlertDelivery.objects.filter(status=DeliveryStatus.DELIVERED).exists(), timeout=60)
    finally:
        receiver.stop()

    delivery = AlertDelivery.objects.get()
    assert (delivery.event, delivery.attempts, delivery.status_code) == ("budget.low", 2, 200)
    assert [r.status for r in receiver.received] == [500, 200]
    assert all(r.signed for r in receiver.received)
    assert receiver.received[0].json["data"]["trigger"] == "lowBalanceAlert"
