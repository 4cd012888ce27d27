"""The page's shared pieces (html.py's result sections, trace_figures.py's I/O trace): cells
that show a value and carry its exact JSON, key/value tables, grids and charts in a <figure>.
Every string is escaped here, so a section cannot forget to."""

from __future__ import annotations

import json
from collections.abc import Iterable
from html import escape
from typing import Any

from mlpstorage_py.report import plots


def text(value: Any) -> str:
    """How a value reads on the page (the exact value is in the cell's data-value)."""
    if value is None:
        return "blank"
    if isinstance(value, float):
        return format(value, ".6g")
    if isinstance(value, list):
        return ", ".join(text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def cell(value: Any, shown: str | None = None) -> str:
    """A <td> with the shown text (text(value) unless given) and, for a machine reading the
    page, the exact JSON value."""
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    data = json.dumps(value, default=str)
    css = ' class="num"' if numeric else ""
    return (f'<td{css} data-value="{escape(data)}">'
            f"{escape(text(value) if shown is None else shown)}</td>")


def pairs(rows: Iterable[tuple[str, Any]], css: str, source: str) -> str:
    """A key/value table; each row's key in data-key."""
    body = "".join(f'<tr data-key="{escape(key)}"><th>{escape(key)}</th>{cell(value)}</tr>' for key, value in rows)
    return f'<table class="{css}" data-source="{escape(source)}">{body}</table>'


def grid(head: list[str], rows: Iterable[list[str]], css: str) -> str:
    """A table of a header and rows of ready cells (cell(...) each)."""
    top = "".join(f"<th>{escape(h)}</th>" for h in head)
    return f'<table class="{css}"><tr>{top}</tr>{"".join("<tr>" + "".join(r) + "</tr>" for r in rows)}</table>'


def chart(found: plots.Chart, ident: str) -> str:
    """The chart's SVG, caption and notes, and its plotted values in a folded table."""
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in found.notes)
    if not found.drawable():
        return (f'<figure class="chart empty" data-chart="{escape(found.key)}"><figcaption>{escape(found.title)}: '
                f"nothing to draw</figcaption>{notes}</figure>")
    head = "".join(f"<th>{escape(c)}</th>" for c in found.categories)
    rows = "".join(f'<tr data-series="{escape(label)}"><th>{escape(label)}</th>{"".join(cell(v) for v in values)}</tr>'
                   for label, values in found.series.items())
    return (f'<figure class="chart" data-chart="{escape(found.key)}">{plots.svg(found, ident)}'
            f"<figcaption>{escape(found.title)} ({escape(found.ylabel)})</figcaption>{notes}"
            f'<details><summary>plotted values</summary><table class="series"><tr><th>{escape(found.xlabel)}</th>{head}</tr>'
            f"{rows}</table></details></figure>")
