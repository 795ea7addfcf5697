import os

from celery import Celery, Task, signals
from celery.worker.request import Request

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

# The message header that carries the id of the request a task was sent from.
REQUEST_ID_HEADER = "studio_request_id"


class ReceivedRequest(Request):
    """A task message as a worker takes it in. Celery logs its "received"
    line as the message arrives, before the task runs (and before
    `task_received`): made here, the request's id is set for that line,
    and forgotten at `task_received`, just after it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from .ops.logs import request_id_set

        request_id_set(self._request_dict.get(REQUEST_ID_HEADER))


class StudioTask(Task):
    Request = ReceivedRequest


app = Celery("studio", task_cls=StudioTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _worker_log_format(logger, **kwargs):
    """A worker sets up its own log handlers; with STUDIO_LOG_FORMAT=json
    they write JSON lines too."""
    from django.conf import settings

    from .ops.logs import handlers_format_as_json

    if settings.STUDIO_LOG_FORMAT == "json":
        handlers_format_as_json(logger)


@signals.worker_ready.connect
def _worker_heartbeats_start(sender, **kwargs):
    """The worker tells readiness and /metrics it is alive, until it stops."""
    from .ops.heartbeats import worker_heartbeats_start

    worker_heartbeats_start(sender.hostname)


@signals.worker_shutdown.connect
def _worker_heartbeats_stop(sender, **kwargs):
    from .ops.heartbeats import worker_heartbeats_stop

    worker_heartbeats_stop(sender.hostname)


@signals.worker_init.connect
@signals.beat_init.connect
def _process_metrics_start(**kwargs):
    """A worker and beat report their memory, CPU and starts (studio/ops/process_metrics.py)."""
    from .ops.process_metrics import process_metrics_start

    process_metrics_start()


@signals.worker_process_init.connect
def _pool_child_metrics_start(**kwargs):
    """A worker's pool child reports its own, under its worker's name."""
    from .ops.process_metrics import process_metrics_forget_fork, process_metrics_start

    process_metrics_forget_fork()
    process_metrics_start(count_start=False)


@signals.before_task_publish.connect
def _beat_sends_the_sweep(sender=None, **kwargs):
    """Beat is alive: it sends the sweep (the dead man's switch `beat`,
    studio/ops/jobs.py). Only beat sends that task."""
    from django.conf import settings

    if sender == settings.CELERY_BEAT_SCHEDULE["sweep"]["task"]:
        from .ops.jobs import job_ran

        job_ran("beat")


@signals.before_task_publish.connect
def _request_id_send(headers=None, **kwargs):
    """A task sent while a request runs carries the request's id."""
    from .ops.logs import request_id

    if headers is not None and request_id():
        headers[REQUEST_ID_HEADER] = request_id()


@signals.task_received.connect
def _request_id_received(**kwargs):
    """The "received" line is written: the worker's own lines after it
    belong to no request (the task's run sets its id again)."""
    from .ops.logs import request_id_set

    request_id_set(None)


@signals.task_prerun.connect
def _request_id_take(task=None, **kwargs):
    """Every line logged while the task runs (Celery's own end of it
    included) carries the id of the request that sent it."""
    from .ops.logs import request_id_set

    request_id_set(getattr(task.request, REQUEST_ID_HEADER, None))


@signals.task_postrun.connect
def _request_id_forget(**kwargs):
    from .ops.logs import request_id_set

    request_id_set(None)
