"""Celery tasks: take an id, call the domain, nothing more."""

from celery import shared_task

from billing.alerts import ALERT_TASK, delivery_attempt


@shared_task(name=ALERT_TASK, bind=True, max_retries=None, ignore_result=True, acks_late=True)
def alert_deliver_task(self, delivery_id: int) -> None:
    """Try an alert's delivery; when it asks for another attempt, retry
    after its backoff. The delivery's row decides when it has failed for
    good, not the task's count of retries; a task delivered twice finds
    the delivery claimed or done, and does nothing."""
    wait = delivery_attempt(delivery_id)
    if wait is not None:
        raise self.retry(countdown=wait)
