import json

from django.core.management.base import BaseCommand, CommandError
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer

from agents.api.client_schema import client_file_text, client_paths, definition_schema


class Command(BaseCommand):
    help = (
        "Write the agent definition's schema, as the studio's OpenAPI schema states it, into the "
        "clients (clients/js, clients/python), which check an agent's options against it when it "
        "is constructed. --check: change nothing, exit non-zero when a client's copy differs."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--check", action="store_true", help="Only say whether the clients' copies are current."
        )

    def handle(self, *args, check=False, **options):
        openapi = json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(public=True)))
        text = client_file_text(definition_schema(openapi))
        stale = [path for path in client_paths() if not path.exists() or path.read_text() != text]
        if check:
            if stale:
                raise CommandError(
                    "Out of date (run manage.py definitionschema): " + ", ".join(str(p) for p in stale)
                )
            self.stdout.write("the clients' definition schemas are current")
            return
        for path in stale:
            path.write_text(text)
            self.stdout.write(f"wrote {path}")
        if not stale:
            self.stdout.write("the clients' definition schemas were current already")
