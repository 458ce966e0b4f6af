"""The OpenTelemetry SDK for tests: spans kept by the SDK's in-memory exporter and metrics read
by its in-memory reader, in this process.

A process has one global tracer provider, set once, and the library's spans would otherwise
record through it in every test that follows: this one samples nothing except inside
`captured()`, so tests outside it see the library as it runs with no SDK installed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, TraceState
from opentelemetry.util.types import Attributes

__all__ = ["Captured", "captured", "metric_points"]


class _WhileCapturing(Sampler):
    def __init__(self) -> None:
        self.on = False

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if not self.on:
            return SamplingResult(Decision.DROP)
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "WhileCapturing"


@dataclass
class _Sdk:
    sampler: _WhileCapturing
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader


_sdk: _Sdk | None = None


def _installed() -> _Sdk:
    global _sdk
    if _sdk is None:
        sampler, spans, reader = _WhileCapturing(), InMemorySpanExporter(), InMemoryMetricReader()
        provider = TracerProvider(sampler=sampler)
        provider.add_span_processor(SimpleSpanProcessor(spans))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _sdk = _Sdk(sampler, spans, reader)
    return _sdk


@dataclass
class Captured:
    """The spans that ended while capturing, and the metric reader."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {[s.name for s in self.spans]}"
        return found[0]

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        return metric_points(self.reader, metric)


@contextmanager
def captured() -> Iterator[Captured]:
    """Spans recorded and kept while the block runs (metrics are cumulative: compare
    before and after)."""
    sdk = _installed()
    sdk.spans.clear()
    sdk.sampler.on = True
    try:
        yield Captured(sdk.spans, sdk.reader)
    finally:
        sdk.sampler.on = False


def metric_points(reader: InMemoryMetricReader, metric: str) -> list[tuple[dict[str, Any], Any]]:
    """(attributes, data point) of every point of `metric` the reader holds now."""
    data = reader.get_metrics_data()
    found: list[tuple[dict[str, Any], Any]] = []
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for m in scope.metrics:
                if m.name == metric:
                    found.extend((dict(p.attributes or {}), p) for p in m.data.data_points)
    return found
