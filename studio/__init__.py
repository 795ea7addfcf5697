# The studio's version, in this one place: /healthz, /readyz, the metrics
# (studio_build_info) and scripts/studioctl read it; CHANGELOG.md's newest
# release heading names it, and its release is tagged v<version> in git.
__version__ = "0.1.0"

# Importing the Celery app here makes `.delay()` use the configured broker
# (without it Celery silently targets amqp://localhost).
from .celery import app as celery_app  # noqa: E402

__all__ = ["__version__", "celery_app"]
