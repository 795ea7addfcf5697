"""Reading Prometheus's text format: samples, and what they moved by."""

from prometheus_client.parser import text_string_to_metric_families


def samples_of(text: str) -> dict:
    """{(name, sorted labels): value} of every sample in a scrape."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class Moves:
    """What each sample moved by between two scrapes."""

    def __init__(self, before: dict, after: dict):
        self.before, self.after = before, after

    def __call__(self, name: str, **labels) -> float:
        return value(self.after, name, **labels) - value(self.before, name, **labels)
