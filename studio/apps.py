from django.apps import AppConfig


class StudioConfig(AppConfig):
    name = "studio"
    verbose_name = "Studio"

    def ready(self):
        from .middleware import django_middleware_declare_sync_only

        django_middleware_declare_sync_only()
