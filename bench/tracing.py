"""Tracing switched on and off within one process, for benchmarks that compare the two in
interleaved rounds: the global tracer provider can be set only once, so the one set here hands
out tracers that go to the OpenTelemetry SDK (every span sampled, a batch processor, an exporter
that drops what it is given) while `on` holds, and to the API's no-op tracer (what a process
with no SDK installed gets) otherwise."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

__all__ = ["Switch", "installed"]


class _Dropped(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class _Tracer(trace.Tracer):
    def __init__(self, switch: Switch, sdk: trace.Tracer) -> None:
        self.switch, self.sdk, self.noop = switch, sdk, trace.NoOpTracer()

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return (self.sdk if self.switch.on else self.noop).start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return (self.sdk if self.switch.on else self.noop).start_as_current_span(*args, **kwargs)


class Switch(trace.TracerProvider):
    def __init__(self) -> None:
        self.on = False
        self.sdk = TracerProvider()
        self.sdk.add_span_processor(BatchSpanProcessor(_Dropped()))

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _Tracer(self, self.sdk.get_tracer(*args, **kwargs))

    @contextmanager
    def tracing(self) -> Iterator[None]:
        self.on = True
        try:
            yield
        finally:
            self.on = False


_switch: Switch | None = None


def installed() -> Switch:
    """The process's switch, installed as its global tracer provider on first use."""
    global _switch
    if _switch is None:
        _switch = Switch()
        trace.set_tracer_provider(_switch)
    return _switch
