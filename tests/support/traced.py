"""`python -m tests.support.traced MODULE ARGS...` runs `python -m MODULE ARGS...` with the
OpenTelemetry SDK installed as an operator would install it: every span, as it ends, is written
as one JSON line to the file `SIGNOFF_TEST_SPANS` names, for a test in another process to read."""

from __future__ import annotations

import json
import os
import runpy
import sys
from collections.abc import Sequence
from typing import IO

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

SPANS_ENV = "SIGNOFF_TEST_SPANS"


class JsonLines(SpanExporter):
    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            parent = span.parent
            line = {
                "name": span.name,
                "kind": span.kind.name,
                "trace_id": f"{span.context.trace_id:032x}",
                "span_id": f"{span.context.span_id:016x}",
                "parent_span_id": None if parent is None else f"{parent.span_id:016x}",
                "attributes": dict(span.attributes or {}),
                "status": span.status.status_code.name,
                "description": span.status.description,
                "events": [[e.name, dict(e.attributes or {})] for e in span.events],
            }
            self.out.write(json.dumps(line, default=str) + "\n")
        self.out.flush()
        return SpanExportResult.SUCCESS


def main() -> None:
    out = open(os.environ[SPANS_ENV], "a", encoding="utf-8")  # noqa: SIM115  (open for the process)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLines(out)))
    trace.set_tracer_provider(provider)
    module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
