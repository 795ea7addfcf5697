from django.apps import AppConfig


class StudioConfig(AppConfig):
    name = "studio"
    verbose_name = "Studio"

    def ready(self):
        from .serving.middleware import django_middleware_declare_sync_only

        django_middleware_declare_sync_only()
        database_pool_retries_every_second()


def database_pool_retries_every_second() -> None:
    """psycopg_pool tries a connection that failed again after 1 s, then 2,
    4, 8, 16 … (until its reconnect_timeout): after a 20 s database outage
    a web process's pool could go on failing for as long again, every
    request waiting for a connection (then 503) all the while. Every second
    instead (jittered): a process serves again within about a second of
    its database. The same pace applies to a checked connection found
    broken (`CONN_HEALTH_CHECKS`): the next is tried a second later."""
    try:
        from psycopg_pool.base import AttemptWithBackoff
    except ImportError:  # no pool installed: nothing retries
        return
    AttemptWithBackoff.DELAY_BACKOFF = 1.0
