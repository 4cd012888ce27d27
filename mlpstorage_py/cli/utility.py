"""init, validate, reports, history and version."""

from __future__ import annotations

import argparse
from typing import Any

from mlpstorage_py.cli.command import results_dir
from mlpstorage_py.cli.common import add_universal, positive_int


def register(top: Any) -> None:
    p = top.add_parser("init", help="initialise a results directory for an organization",
                       description="Write the results sentinel for <org> and record <dir> as the default results "
                                   "directory, unless the default already names another results tree (--set-default).")
    p.add_argument("org", help="organization name ([A-Za-z0-9._-]+)")
    p.add_argument("dir", nargs="?", default="~/mlpstorage-results", help="results directory (default ~/mlpstorage-results)")
    p.add_argument("--set-default", action="store_true",
                   help="make <dir> the default results directory even when the default names another results tree")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    p.set_defaults(_handler="init")

    p = top.add_parser("validate", help="check a results tree or submission package against the rules",
                       description="Check a package against the rules; exit 0 when nothing fails, 1 otherwise.")
    p.add_argument("package", nargs="?", help="package or results directory (default: the resolved results directory)")
    p.add_argument("--list-rules", action="store_true", help="list every numbered rule and whether validate checks it")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="also write the findings as JSON to FILE (or to stdout with no FILE)")
    p.add_argument("--submitters", metavar="A,B", help="check only these organizations")
    p.add_argument("--reference-checksum", metavar="MD5",
                   help="the sanctioned release's md5-tree-v2 digest, when not yet in code-images/reference-digests.yaml")
    add_universal(p, writes_leaf=False)
    p.set_defaults(_handler="validate")

    p = top.add_parser("reports", help="aggregate results: `reports reportgen`, `reports html`")
    sub = p.add_subparsers(dest="report_command", metavar="<command>", required=True)
    r = sub.add_parser("reportgen", help="write the results tables, public IDs and submission.yaml",
                       description="Compute each result's figures by the rules into results.json, the organization's "
                                   "results.json/results.csv rollups with pinned Public IDs, and submission.yaml.")
    add_universal(r, writes_leaf=False)
    r.set_defaults(_handler="reportgen")
    r = sub.add_parser("html", help="write one self-contained HTML page of the tree: figures, plots, findings",
                       description="Per result: the figures of its results.json (run reportgen first), plots of its "
                                   "runs and the validate findings, as one HTML page that loads nothing from anywhere.")
    r.add_argument("--output", "-o", metavar="FILE",
                   help="the page to write, outside the tree (default ./<results-dir name>-report.html)")
    r.add_argument("--force", action="store_true", help="replace an existing FILE")
    add_universal(r, writes_leaf=False)
    r.set_defaults(_handler="mlpstorage_py.cli.utility:reports_html")

    p = top.add_parser("history", help="show or re-run recorded commands")
    sub = p.add_subparsers(dest="history_command", metavar="<command>", required=True)
    s = sub.add_parser("show", help="list recorded commands")
    s.add_argument("--limit", "-n", type=positive_int, help="only the last N entries")
    s.add_argument("--id", "-i", type=positive_int, help="only entry ID")
    add_universal(s, writes_leaf=False)
    s.set_defaults(_handler="history_show")
    s = sub.add_parser("rerun", help="run a recorded command again (a new leaf; nothing is overwritten)")
    s.add_argument("id", type=positive_int, help="entry ID from `history show`")
    add_universal(s, writes_leaf=False)
    s.set_defaults(_handler="history_rerun")

    p = top.add_parser("version", help="print the tool version, rules edition and layout version")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    p.set_defaults(_handler="mlpstorage_py.main:version")


def reports_html(args: dict[str, Any], argv: list[str]) -> int:
    from mlpstorage_py.errors import NotFoundError
    from mlpstorage_py.report import html

    root = results_dir(args).resolve()
    if not root.is_dir():
        raise NotFoundError(f"results directory {root} does not exist")
    output, counts = html.write(root, args.get("output"), bool(args.get("force")))
    print(f"wrote {output}: {counts['results']} results, {counts['charts']} charts, {counts['findings']} findings")
    return 0
