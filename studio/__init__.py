# Importing the Celery app here makes `.delay()` use the configured broker
# (without it Celery silently targets amqp://localhost).
from .celery import app as celery_app

__all__ = ["celery_app"]
