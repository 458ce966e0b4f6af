"""MkDocs hooks: the reference pages are generated from the code at every build, so they cannot
drift from it.

- `<!-- generated: cli-reference -->` on a page becomes the help of every `signoff` command,
  read from `adapters.cli.build_parser()`.
- `<!-- generated: http-api -->` becomes the operations of the HTTP API as tables, read from the
  OpenAPI document of `adapters.http.create_app`; that document is also published beside the
  page as `openapi.json`.

Nothing is fetched from the network: both come from the installed code (the `docs` extra).
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any, cast

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

CLI_MARKER = "<!-- generated: cli-reference -->"
API_MARKER = "<!-- generated: http-api -->"
API_PAGE = "http/api.md"
HELP_COLUMNS = "100"  # argparse wraps help to $COLUMNS: fix it so every build is the same


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document `signoff serve` publishes at /v1/openapi.json."""
    from adapters.http.app import create_app
    from adapters.http.service import Service

    # The document depends on the routes alone: the app is never started, so the service it is
    # given holds only what `create_app` reads while wiring its middleware.
    stand_in = SimpleNamespace(max_body_bytes=0, metrics=None)
    return create_app(cast(Service, stand_in)).openapi()


def cli_reference() -> str:
    """`signoff --help` and the help of every group and command below it, one section each."""
    from adapters.cli import build_parser
    from adapters.cli.arguments import all_parsers

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parser = build_parser()
        parts = []
        for words, sub in all_parsers(parser):
            title = " ".join(["signoff", *words])
            parts.append(f"## `{title}`\n\n```text\n{sub.format_help().rstrip()}\n```\n")
        return "\n".join(parts)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def _cell(text: object) -> str:
    """Text for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|") or "-"


def _schema_name(schema: dict[str, Any]) -> str:
    """A short name for a JSON schema: its component, its type, or its alternatives."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(_schema_name(s) for s in schema[key])
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return f"`{schema.get('type', 'any')}`"


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    """One operation: its summary, parameters, request body and responses."""
    out = [f"## `{method.upper()} {path}`", ""]
    if op.get("summary"):
        out += [f"**{op['summary']}**", ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    parameters = op.get("parameters", [])
    if parameters:
        out += ["| parameter | in | required | type | description |", "|---|---|---|---|---|"]
        for p in parameters:
            required = "yes" if p.get("required") else "no"
            kind, text = _schema_name(p.get("schema", {})), _cell(p.get("description", ""))
            out.append(f"| `{p['name']}` | {p['in']} | {required} | {kind} | {text} |")
        out.append("")
    for media, content in op.get("requestBody", {}).get("content", {}).items():
        out += [f"Request body ({media}): {_schema_name(content.get('schema', {}))}", ""]
    out += ["| status | description | body |", "|---|---|---|"]
    for status, response in op.get("responses", {}).items():
        bodies = response.get("content", {}).values()
        shapes = ", ".join(_schema_name(c.get("schema", {})) for c in bodies) or "-"
        out.append(f"| {status} | {_cell(response.get('description', ''))} | {shapes} |")
    return [*out, ""]


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    """One component schema: its fields, or its values."""
    out = [f"### {name}", ""]
    if schema.get("description"):
        out += [_cell(schema["description"]), ""]
    properties = schema.get("properties", {})
    if properties:
        required = set(schema.get("required", []))
        out += ["| field | type | required | description |", "|---|---|---|---|"]
        for field, spec in properties.items():
            kind, text = _schema_name(spec), _cell(spec.get("description", ""))
            out.append(f"| `{field}` | {kind} | {'yes' if field in required else 'no'} | {text} |")
        out.append("")
    elif "enum" in schema:
        out += [_schema_name(schema), ""]
    return out


def api_reference(document: dict[str, Any]) -> str:
    """The document's operations, then its schemas, as Markdown tables."""
    out: list[str] = []
    for path, operations in document.get("paths", {}).items():
        for method, op in operations.items():
            out += _operation(method, path, op)
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        out += ["## Schemas", ""]
    for name, schema in schemas.items():
        out += _schema(name, schema)
    return "\n".join(out)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Publish the OpenAPI document beside the API reference page."""
    text = json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"
    files.append(File.generated(config, "http/openapi.json", content=text))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Put the generated references where their pages ask for them."""
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if API_MARKER in markdown:
        markdown = markdown.replace(API_MARKER, api_reference(openapi_document()))
    return markdown
