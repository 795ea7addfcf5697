import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

app = Celery("studio")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _worker_log_format(logger, **kwargs):
    """A worker sets up its own log handlers; with STUDIO_LOG_FORMAT=json
    they write JSON lines too."""
    from django.conf import settings

    from .logs import handlers_format_as_json

    if settings.STUDIO_LOG_FORMAT == "json":
        handlers_format_as_json(logger)


@signals.worker_ready.connect
def _worker_heartbeats_start(sender, **kwargs):
    """The worker tells readiness and /metrics it is alive, until it stops."""
    from .heartbeats import worker_heartbeats_start

    worker_heartbeats_start(sender.hostname)


@signals.worker_shutdown.connect
def _worker_heartbeats_stop(sender, **kwargs):
    from .heartbeats import worker_heartbeats_stop

    worker_heartbeats_stop(sender.hostname)
