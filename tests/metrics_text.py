"""Reading Prometheus text in tests."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample_value(text: str, sample_name: str, **labels: str) -> float | None:
    """The value of the one sample with this name whose labels include `labels`."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == sample_name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None
