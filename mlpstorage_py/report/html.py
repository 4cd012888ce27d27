"""`mlpstorage reports html`: one self-contained page of a results tree, for a reviewer's eyes.

Per result: the figures reportgen wrote to its results.json, pictures of the runs behind them
(plots.py, inline SVG) with the plotted values, each traced leaf's I/O trace (trace_figures.py)
and the checker's findings. The tree is read
once, as validate reads it (checker.validate's Package); every string from the tree is
untrusted and escaped, and the page loads nothing: no script, no font, no stylesheet, and a
Content-Security-Policy that blocks any request, so a page that tried one would say so.
"""

from __future__ import annotations

from collections import defaultdict
from html import escape
from pathlib import Path
from typing import Any

from mlpstorage_py.checker.registry import INVALID, WARNING, Finding
from mlpstorage_py.errors import NotFoundError, UsageError
from mlpstorage_py.progress import Progress
from mlpstorage_py.report import plots, telemetry_figures, trace_figures
from mlpstorage_py.report.markup import chart as _chart
from mlpstorage_py.report.markup import pairs as _pairs
from mlpstorage_py.results.io import atomic_write_text
from mlpstorage_py.results.tree.package import Leaf, Package

NO_PICTURES = '<p class="note">no pictures</p>'
CSP = "default-src 'none'; style-src 'unsafe-inline'"
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-top: 2px solid #ccc; padding-top: .8em; }
h3 { font-size: 1em; margin-bottom: .3em; } h4 { font-size: .95em; margin: .8em 0 .2em; }
table { border-collapse: collapse; margin: .3em 0 .8em; } td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: left; overflow-wrap: break-word; }
th, .summary td:nth-child(n+2) { white-space: nowrap; }
.findings { table-layout: fixed; width: 100%; } .findings td { overflow-wrap: anywhere; }
.findings th:nth-child(1) { width: 5.5em; } .findings th:nth-child(2) { width: 4.5em; }
.findings th:nth-child(3) { width: 14em; white-space: normal; } .findings th:nth-child(4) { width: 32%; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.INVALID { color: #b00020; font-weight: bold; } .WARNING { color: #a05a00; } .valid { color: #1b7f3b; font-weight: bold; }
figure.chart { margin: .5em 0 1em; } figure.chart svg { width: 760px; height: auto; max-width: 100%; }
figure.telemetry svg { width: 100%; }
.note { color: #666; font-size: .9em; } code { font-size: .95em; }
"""


def _path(text: str) -> str:
    """An escaped path that may wrap after each slash (package paths are long and unbroken)."""
    return escape(text).replace("/", "/<wbr>")


def _verdict(findings: list[Finding]) -> str:
    return INVALID if any(f.severity == INVALID for f in findings) else "valid"


def _where(pkg: Package, path: str) -> str:
    root = str(pkg.root)
    return path[len(root) + 1:] if path.startswith(root + "/") else path


def _findings(pkg: Package, findings: list[Finding]) -> str:
    if not findings:
        return '<p class="note">no findings</p>'
    rows = "".join(f'<tr class="finding" data-rule="{escape(f.rule)}" data-severity="{escape(f.severity)}">'
                   f'<td class="{escape(f.severity)}">{escape(f.severity)}</td><td>{escape(f.rule)}</td>'
                   f"<td>{escape(f.name)}</td><td><code>{_path(_where(pkg, f.path))}</code></td>"
                   f"<td>{escape(f.message)}</td></tr>" for f in findings)
    return ('<table class="findings"><tr><th>severity</th><th>rule</th><th>name</th><th>where</th><th>finding</th></tr>'
            f"{rows}</table>")


def _table_part(runs: list[Leaf]) -> tuple[str, dict[str, Any] | None]:
    """The result's results.json as figures, issues and row, or a note saying why there is none."""
    if not runs:
        return '<p class="note">no run leaves: nothing to report yet</p>', None
    found_table = runs[0].results_table
    if found_table.missing:
        return ('<p class="note">no results.json: run <code>mlpstorage reports reportgen</code> to compute the '
                "figures</p>"), None
    if found_table.problem:
        return f'<p class="note">results.json is unreadable: {escape(found_table.problem)}</p>', None
    table = found_table.value or {}  # read without a problem: an object
    parts = []
    found = table.get("figures")
    if isinstance(found, dict):
        parts.append(_pairs(found.items(), "figures", "results.json figures"))
    issues = table.get("issues")
    if isinstance(issues, list) and issues:
        parts.append('<h3>Issues</h3><ul class="issues">' + "".join(f"<li>{escape(str(i))}</li>" for i in issues) + "</ul>")
    rows = [r for r in table.get("rows") or [] if isinstance(r, dict)] if isinstance(table.get("rows"), list) else []
    for row in rows:
        parts.append(f"<details><summary>results table row</summary>{_pairs(row.items(), 'row', 'results.json rows')}</details>")
    return "".join(parts), table


def _section(pkg: Package, index: int, workload: Path, leaves: list[Leaf], findings: list[Finding]) -> tuple[str, int]:
    first = leaves[0]
    runs = sorted((l for l in leaves if l.command == "run"), key=lambda l: l.path.name)
    rel = workload.relative_to(pkg.root).as_posix()
    table_html, table = _table_part(runs)
    charts = plots.charts_of(first.benchmark, runs) if runs else []
    verdict = _verdict(findings)
    meta = [("division", first.division), ("organization", first.org), ("system", first.system),
            ("benchmark", first.benchmark), ("model", first.model), ("Public ID", (table or {}).get("public_id")),
            ("runs", [l.path.name for l in runs])]
    ordered = sorted(leaves, key=lambda l: l.path.name)
    traced, traced_drawn = trace_figures.section(ordered, f"r{index}")
    telemetry, telemetry_drawn = telemetry_figures.section(ordered, f"r{index}")
    drawn = sum(c.drawable() for c in charts) + traced_drawn + telemetry_drawn
    html = (f'<section class="result" id="r{index}" data-result="{escape(rel)}"><h2>{_path(rel)} '
            f'<span class="{verdict}">{verdict}</span></h2>{_pairs(meta, "meta", "tree")}'
            f"<h3>Figures (results.json)</h3>{table_html}"
            f"<h3>Pictures</h3>{''.join(_chart(c, f'r{index}-{c.key}') for c in charts) or NO_PICTURES}{telemetry}{traced}"
            f"<h3>Validation findings</h3>{_findings(pkg, findings)}</section>")
    return html, drawn


def build(root: Path) -> tuple[str, dict[str, int]]:
    """The page and its counts (results, charts drawn, findings), from one validation of the tree."""
    from mlpstorage_py import checker

    pkg, findings = checker.validate(root)
    grouped: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        grouped[pkg.result_of(f.path)].append(f)
    by_workload: dict[Path, list[Leaf]] = defaultdict(list)
    for leaf in pkg.leaves:
        by_workload[leaf.workload_dir].append(leaf)
    sections, summary, drawn, results = [], [], 0, pkg.results()
    with Progress("reports html", total=len(results), unit="results drawn") as progress:
        for index, workload in enumerate(results, 1):
            rel = workload.relative_to(pkg.root).as_posix()
            mine = grouped.get(rel, [])
            html, charts = _section(pkg, index, workload, by_workload[workload], mine)
            sections.append(html)
            drawn += charts
            progress.advance()
            first, verdict = by_workload[workload][0], _verdict(mine)
            summary.append(f'<tr><td><a href="#r{index}">{_path(rel)}</a></td><td>{escape(first.benchmark)}</td>'
                           f'<td>{escape(first.model)}</td><td class="{verdict}">{verdict}</td>'
                           f"<td>{sum(f.severity == INVALID for f in mine)}</td>"
                           f"<td>{sum(f.severity == WARNING for f in mine)}</td></tr>")
    package_findings = grouped.get("package", [])
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f"<title>MLPerf Storage results: {escape(pkg.root.name)}</title><style>{STYLE}</style></head><body>"
            f"<h1>MLPerf Storage results: <code>{escape(str(pkg.root))}</code></h1>"
            f'<p class="note">{len(pkg.results())} results, {len(pkg.leaves)} leaves, {len(findings)} findings '
            f"({sum(f.severity == INVALID for f in findings)} INVALID). Figures are reportgen's results.json; "
            f"findings are <code>mlpstorage validate</code>'s.</p>"
            '<table class="summary"><tr><th>result</th><th>benchmark</th><th>model</th><th>verdict</th><th>INVALID</th>'
            f"<th>WARNING</th></tr>{''.join(summary)}</table>"
            f'<section class="package"><h2>Package findings <span class="{_verdict(package_findings)}">'
            f"{_verdict(package_findings)}</span></h2>{_findings(pkg, package_findings)}</section>"
            f"{''.join(sections)}</body></html>\n")
    return page, {"results": len(sections), "charts": drawn, "findings": len(findings)}


def _output(root: Path, flag: str | None, force: bool) -> Path:
    """Where the page goes: never inside the tree (validate would flag it, submit would pack
    it), never over an existing file without --force."""
    output = Path(flag).expanduser() if flag else Path.cwd() / f"{root.name}-report.html"
    output = output.parent.resolve() / output.name
    if output == root or root in output.parents:
        raise UsageError(f"--output {output} is inside the results tree {root}; write the page outside it")
    if not output.parent.is_dir():
        raise NotFoundError(f"directory {output.parent} does not exist")
    if (output.exists() or output.is_symlink()) and not force:
        raise UsageError(f"{output} already exists; pass --force to replace it")
    if output.is_dir():
        raise UsageError(f"{output} is a directory")
    return output


def write(root: Path, flag: str | None, force: bool) -> tuple[Path, dict[str, int]]:
    """Build the page of the tree at root and write it where --output (flag) says; the file and its counts."""
    output = _output(root, flag, force)
    plots.require_matplotlib()
    page, counts = build(root)
    atomic_write_text(output, page)  # a link at the output is replaced, never followed
    return output, counts
