"""Generate the site's reference of settings and names from their one home, so the pages cannot drift.

An MkDocs hook (``mkdocs.yml``: ``hooks``): on every build it renders ``reference/settings.md`` from the field
table (``cp_observe/_config/_settings.py``, extended by ``cp_observe/serve/_settings.py``) and
``reference/names.md`` from ``cp_observe/_names.py`` (each constant with its value and the comment above it; a
metric's ``-> series`` comment gives its Prometheus name), and adds them to the site as generated files.
Nothing generated is written into ``docs/``.

It runs in the docs venv (``.venv-docs``), which has MkDocs but none of the library's dependencies: the three
modules it reads import only the standard library and the root vocabulary, and ``serve/_settings.py`` is loaded
by its path so that ``cp_observe/serve/__init__.py`` (the service, the OpenTelemetry SDK) is not imported.
The tests that once read README's tables (``tests/wiring/test_configure_arguments.py``, ``tests/wiring/test_docs.py``)
import ``settings_page`` and ``names_page`` from here and check what they render.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _importable() -> None:
    """Put the checkout on ``sys.path`` (MkDocs restores ``sys.path`` after loading a hook, so on each call)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))

__all__ = ["GENERATED", "names_page", "on_files", "settings_page"]

#: The pages this hook adds, by their path under docs/.
GENERATED = ("reference/settings.md", "reference/names.md")


def _serve_settings() -> ModuleType:
    _importable()
    name = "cp_observe.serve._settings"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "cp_observe" / "serve" / "_settings.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look the module up while building the class
    spec.loader.exec_module(module)
    return module


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _type(field: Any) -> str:
    shown = getattr(field.annotation, "__name__", str(field.annotation)).replace(" | None", "")
    shown = "secret" if shown.endswith("Secret") else shown
    return f"{shown} or unset" if field.optional else shown


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _default(field: Any) -> str:
    if field.default is None:
        return "—"
    if isinstance(field.default, bool):
        return f"`{str(field.default).lower()}`"
    return f"`{field.default}`"


def _bounds(field: Any) -> str:
    parts = [f"{op} {_number(value)}" for op, value in ((">", field.gt), ("≥", field.ge), ("≤", field.le))
             if value is not None]
    if field.pattern:
        parts.append(f"matches `{field.pattern}`")
    if field.check is not None:
        parts.append("checked")
    return ", ".join(parts) or "—"


def _row(name: str, field: Any, env_prefix: str, *cells: str) -> str:
    variable = f"`{env_prefix}{name.upper()}`"
    return "| " + " | ".join((f"`{name}`", variable, *cells, _type(field), _default(field), _bounds(field),
                               _cell(field.description))) + " |"


def settings_page() -> str:
    """The settings reference: the library's table, then ``cp-observe serve``'s own and changed fields."""
    _importable()
    from cp_observe._config._settings import Settings
    from cp_observe._names import ENV_PREFIX

    serve = _serve_settings()
    lines = [
        "# Settings",
        "",
        "Generated from the one field table (`cp_observe/_config/_settings.py`, which `cp-observe serve` extends",
        "in `cp_observe/serve/_settings.py`) on every build of this site, so it lists exactly the settings the",
        "installed code reads.",
        "",
        "Explicit argument > environment variable > default. Bad arguments raise `ConfigurationError` at",
        "configuration; bad environment values log a warning and fall back to the default. Numbers are read as",
        "Python reads them (`1e3`, `1_000`; a whole number may end in `.0`), booleans as `true`/`false`,",
        "`yes`/`no`, `on`/`off`, `t`/`f`, `y`/`n` or `1`/`0` in any case. The error names every bad setting and",
        "what it must be (`queue_size=0: must be >= 1`); a key is shown as `***`. Content capture is also off",
        "with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=false` or `NO_CONTENT`.",
        "",
        "## The library: `configure()` and `CP_OBSERVE_*`",
        "",
        "Every setting below is a keyword argument of `cp_observe.configure()` and a `CP_OBSERVE_*` variable.",
        "Those whose meaning starts with *(processor)* are also keyword arguments of",
        "`ContextPrecisionProcessor`, with the same name, default and bounds (there, `capture_content` left unset",
        "follows the runtime's, and `data_source`, `segments` and `cheap_judge` also take a callable, a list or a",
        "`Judge`); the processor reads no variable.",
        "",
        "| setting | variable | type | default | bounds | meaning |",
        "|---|---|---|---|---|---|",
    ]
    lines += [_row(name, field, ENV_PREFIX).replace(" | " + _cell(field.description) + " |",
                                                     " | *(processor)* " + _cell(field.description) + " |")
              if field.processor else _row(name, field, ENV_PREFIX)
              for name, field in Settings.model_fields.items()]
    flags = set(serve.SERVE_FIELDS)
    own = [(name, field) for name, field in serve.ServeSettings.model_fields.items()
           if name not in Settings.model_fields
           or field.description != Settings.model_fields[name].description]
    lines += [
        "",
        "## The service: `cp-observe serve`",
        "",
        "`cp-observe serve` reads every setting above the same way (the hook-only ones, such as `capture_only`,",
        "`hold_spans` or `metrics_port`, are unused there). Below: the service's own settings, and the",
        "inherited ones whose meaning differs in the service. A setting `x_y` is the flag `--x-y`, except",
        "those marked environment only (secrets never come from a flag, so they never show in a process list);",
        f"{len(flags)} settings are flags in all (`cp-observe serve --help`).",
        "",
        "| setting | variable | flag | type | default | bounds | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, field in own:
        if name in flags:
            flag = "`--no-" + name.replace("_", "-") + "`" if field.annotation is bool and field.default else ""
            flag = "`--" + name.replace("_", "-") + "`" + (f", {flag}" if flag else "")
        else:
            flag = "environment only"
        lines.append(_row(name, field, ENV_PREFIX, flag))
    return "\n".join(lines) + "\n"


_SECTION = re.compile(r"^# --- (.+?) -*$")
_CONSTANT = re.compile(r"^([A-Z][A-Z0-9_]*): Final = ")


def _names() -> list[tuple[str, str, str, str]]:
    """(section, constant, value, comment) for every constant of ``_names.py``, in source order."""
    _importable()
    from cp_observe import _names

    source = (ROOT / "cp_observe" / "_names.py").read_text(encoding="utf-8").splitlines()
    section, comment, out = "", [], []
    for line in source:
        if match := _SECTION.match(line):
            section, comment = match.group(1).strip(), []
        elif line.startswith("#:"):  # a doc comment of the constant below (Sphinx's convention)
            comment.append(line[2:].strip())
        elif match := _CONSTANT.match(line):
            value = getattr(_names, match.group(1))
            shown = ", ".join(f"`{v}`" for v in value) if isinstance(value, tuple) else f"`{value}`"
            inline = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            out.append((section, match.group(1), shown, " ".join([*comment, inline]).strip()))
            comment = []
        elif not line.startswith("#"):
            comment = []
    return out


def _series(comment: str) -> tuple[str, str]:
    """A metric comment ``kind ... -> series`` as (what it is, Prometheus series)."""
    what, _, series = comment.rpartition("->")
    return what.strip(), series.strip()


def names_page() -> str:
    """Every name of ``_names.py``: the metrics with their Prometheus series, then each section's constants."""
    entries = _names()
    metrics = [e for e in entries if re.match(r"(SERVE_|SINK_)?METRIC_", e[1])]
    lines = [
        "# Names: attributes, events, metrics and variables",
        "",
        "Generated from `cp_observe/_names.py`, the one module that spells every span attribute, event, metric",
        "and environment variable name, on every build of this site. [What it emits](emitted.md) says which",
        "name goes on which span, event or series, and when.",
        "",
        "## Every metric and its Prometheus series",
        "",
        "| constant | OpenTelemetry instrument | what it is | Prometheus series |",
        "|---|---|---|---|",
    ]
    for _, constant, value, comment in metrics:
        what, series = _series(comment)
        series_cell = f"`{series}`" if series else "—"
        lines.append(f"| `{constant}` | {value} | {_cell(what) or '—'} | {series_cell} |")
    current = None
    for section, constant, value, comment in entries:
        if section != current:
            current = section
            title = section if section.startswith("cp-") else section[:1].upper() + section[1:]
            lines += ["", f"## {title}", "", "| constant | value | note |", "|---|---|---|"]
        lines.append(f"| `{constant}` | {value} | {_cell(comment) or '—'} |")
    return "\n".join(lines) + "\n"


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated pages to the build."""
    from mkdocs.structure.files import File

    for path, render in zip(GENERATED, (settings_page, names_page), strict=True):
        files.append(File.generated(config, path, content=render()))
    return files
