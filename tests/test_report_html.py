"""`reports html` in a real headless Chromium (Debian's): the page loads without a console
message, its screenshot shows the plots, and every number in it is the one in results.json."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

import synthetic
import synthetic_families
from conftest import REALDATA
from mlpstorage_py import checker

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
FAMILIES = ("training", "checkpointing", "vector_database", "kv_cache")
POISON = '<script>console.error("xss")</script><img src="http://example.invalid/x.png">&amp;'
C0, C1 = (31, 119, 180), (255, 127, 14)  # matplotlib's first two series colours
CHARTS = {"training": {"training-throughput", "training-au"}, "checkpointing": {"checkpoint-write", "checkpoint-read"},
          "kv_cache": {"kv-bandwidth", "kv-p95"},
          # the synthetic HNSW runs record their ef: the search-list sweep is drawn (report/vdb_plots.py)
          "vector_database": {"vdb-qps", "vdb-recall", "vdb-recall-qps", "vdb-latency-search-list"}}
NEWFW = "closed/NewFW/results/Solidigm_D5-P5336_61TB_Gen4_NVMe_QLC"
TTA = "closed/TTA/results/seahorse-storage/vector_database/milvus/DISKANN"


# --- a small DOM of Chromium's --dump-dom --------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list["Node | str"] = field(default_factory=list)

    def all(self, tag: str | None = None, **attrs: str) -> list["Node"]:
        found = []
        for child in self.children:
            if isinstance(child, Node):
                if (tag is None or child.tag == tag) and all(child.attrs.get(k.replace("_", "-")) == v
                                                             for k, v in attrs.items()):
                    found.append(child)
                found.extend(child.all(tag, **attrs))
        return found

    def has(self, name: str) -> list["Node"]:
        return [n for n in self.all() if name in n.attrs]

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.top = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def dom(text: str) -> Node:
    builder = _Builder()
    builder.feed(text)
    return builder.root


# --- chromium ------------------------------------------------------------------------------

def chromium(page: Path, profile: Path, *flags: str) -> tuple[str, list[str]]:
    """Chromium's stdout and the page's console messages (CSP refusals, script errors, logs:
    Chromium logs each as a CONSOLE line at --v=0)."""
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
            "--enable-logging=stderr", "--v=0", "--hide-scrollbars", *flags, page.as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


def coloured(png: Path, colour: tuple[int, int, int], box: tuple[int, int, int, int] | None = None) -> int:
    """Pixels of (nearly) one colour in the screenshot, or in one box of it."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    image = image.crop(box) if box else image
    return sum(n for n, rgb in image.getcolors(image.width * image.height)
               if all(abs(a - b) <= 40 for a, b in zip(rgb, colour)))


def make_page(root: Path, out: Path) -> None:
    from mlpstorage_py.main import main

    assert main(["reports", "html", "--results-dir", str(root), "--output", str(out)]) == 0
    assert out.is_file()


@dataclass
class Rendered:
    root: Path
    page: Path
    html: str
    dom: Node
    console: list[str]
    screenshot: Path | None = None


def sections(doc: Node) -> dict[str, Node]:
    return {s.attrs["data-result"]: s for s in doc.all("section", **{"class": "result"})}


def table_values(section: Node, css: str) -> dict[str, tuple[object, str]]:
    """key -> (exact value, shown text) of a figures/row table."""
    return {tr.attrs["data-key"]: (json.loads(tr.all("td")[0].attrs["data-value"]), tr.all("td")[0].text)
            for table in section.all("table", **{"class": css}) for tr in table.all("tr")}


def series(section: Node, chart: str) -> dict[str, list]:
    figure = section.all("figure", data_chart=chart)[0]
    return {tr.attrs["data-series"]: [json.loads(td.attrs["data-value"]) for td in tr.all("td")]
            for tr in figure.has("data-series")}


def results_json(root: Path, rel: str, benchmark: str) -> dict:
    path = root / rel / ("results.json" if benchmark == "checkpointing" else "run/results.json")
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def mpl_cache(tmp_path_factory):
    """One matplotlib cache for the module (each test has its own HOME): its font list is built once."""
    old = os.environ.get("MPLCONFIGDIR")
    os.environ["MPLCONFIGDIR"] = str(tmp_path_factory.mktemp("mpl"))
    yield
    os.environ.pop("MPLCONFIGDIR") if old is None else os.environ.__setitem__("MPLCONFIGDIR", old)


@pytest.fixture(scope="module")
def synthetic_page(tmp_path_factory, mpl_cache) -> Rendered:
    """A package with runs of every benchmark, one figure string poisoned with markup, rendered
    and loaded once in Chromium (DOM and a 1200x2600 screenshot)."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    base = tmp_path_factory.mktemp("html")
    with synthetic_families.registered():
        root = synthetic.copy_package(base / "pkg", families=FAMILIES)
    training = root / "closed/Acme/results/sys1/training/unet3d/run/results.json"
    synthetic.edit_json(training, lambda d: (d["issues"].append(POISON), d["figures"].update(note=POISON)))
    page = base / "report.html"
    make_page(root, page)
    text, console = chromium(page, base / "profile", "--dump-dom")
    shot = base / "shot.png"
    chromium(page, base / "profile", "--window-size=1200,2600", f"--screenshot={shot}")
    return Rendered(root, page, page.read_text(encoding="utf-8"), dom(text), console, shot)


def test_console_messages_are_seen(tmp_path):
    """The console check can fail: a page that requests a resource and runs a script is caught."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
                   f"<p>x</p>{POISON}", encoding="utf-8")
    _, console = chromium(bad, tmp_path / "profile", "--dump-dom")
    assert any("Content Security Policy" in line and "example.invalid" in line for line in console), console
    assert any("inline script" in line for line in console), console


@needs_chromium
def test_page_loads_without_console_messages_or_requests(synthetic_page):
    assert synthetic_page.console == []
    doc = synthetic_page.dom
    assert doc.all("script") == [] and doc.all("img") == [] and doc.all("link") == []
    assert not [n for n in doc.all() for k, v in n.attrs.items() if k in ("src", "href") and not v.startswith("#")]
    assert "http-equiv" in synthetic_page.html and "default-src 'none'" in synthetic_page.html


@needs_chromium
def test_untrusted_text_is_shown_as_text(synthetic_page):
    training = sections(synthetic_page.dom)["closed/Acme/results/sys1/training/unet3d"]
    assert POISON in training.all("ul", **{"class": "issues"})[0].text
    assert table_values(training, "figures")["note"] == (POISON, POISON)
    assert "<script>" not in synthetic_page.html and "&lt;script&gt;" in synthetic_page.html


@needs_chromium
def test_every_benchmark_is_drawn_and_the_screenshot_shows_it(synthetic_page):
    found = sections(synthetic_page.dom)
    assert len(found) == 4
    for rel, section in found.items():
        benchmark = table_values(section, "meta")["benchmark"][0]
        drawn = {f.attrs["data-chart"] for f in section.all("figure") if f.all("svg")}
        assert drawn == CHARTS[benchmark], rel
    assert len(synthetic_page.dom.all("svg")) == 10
    # the first result (checkpointing) draws two C0 lines in the top 2600 px, and the KV bars use C0 and C1
    assert coloured(synthetic_page.screenshot, C0) > 3000
    assert coloured(synthetic_page.screenshot, C1) > 3000
    assert coloured(synthetic_page.screenshot, (255, 255, 255)) < 1200 * 2600 * 0.97  # not a blank page


@needs_chromium
def test_numbers_in_the_page_are_those_of_results_json(synthetic_page):
    root = synthetic_page.root
    for rel, section in sections(synthetic_page.dom).items():
        benchmark = table_values(section, "meta")["benchmark"][0]
        written = results_json(root, rel, benchmark)
        shown = table_values(section, "figures")
        assert {k: v for k, (v, _) in shown.items()} == written["figures"], rel
        for key, (value, text) in shown.items():
            if isinstance(value, float):
                assert float(text) == pytest.approx(value, rel=1e-5)
        row = {k: v for k, (v, _) in table_values(section, "row").items()}
        assert row == json.loads(json.dumps(written["rows"][0], default=str)), rel
        assert table_values(section, "meta")["Public ID"][0] == written["public_id"]
    # the plotted values are those the figures aggregate (Rules 3.3.8, 4.3.6, 5.x, 6.3.4)
    found = sections(synthetic_page.dom)
    training = found["closed/Acme/results/sys1/training/unet3d"]
    figures = results_json(root, "closed/Acme/results/sys1/training/unet3d", "training")["figures"]
    au = series(training, "training-au")
    measured = [values for name, values in au.items() if "warm-up" not in name]
    assert len(au) == 6 and len(measured) == 5
    assert statistics.fmean(statistics.fmean(v) for v in measured) == pytest.approx(figures["train_mean_of_au_percentage"])
    ckpt = found["closed/Acme/results/sys1/checkpointing/llama3-8b"]
    figures = results_json(root, "closed/Acme/results/sys1/checkpointing/llama3-8b", "checkpointing")["figures"]
    (write,) = series(ckpt, "checkpoint-write").values()
    assert len(write) == 10 and statistics.fmean(write) == pytest.approx(figures["write_bw_gib_s"])
    kv = found["closed/Acme/results/sys1/kv_cache/llama3.1-8b"]
    figures = results_json(root, "closed/Acme/results/sys1/kv_cache/llama3.1-8b", "kv_cache")["figures"]
    read = series(kv, "kv-bandwidth")["Read GiB/s"]
    trials = len(read) // 3
    for i, option in enumerate("123"):
        assert statistics.fmean(read[i * trials:(i + 1) * trials]) == pytest.approx(figures[f"option{option}_read_bw_gib_s"])
    vdb = found["closed/Acme/results/sys1/vector_database/milvus/HNSW"]
    figures = results_json(root, "closed/Acme/results/sys1/vector_database/milvus/HNSW", "vector_database")["figures"]
    assert statistics.fmean(series(vdb, "vdb-qps")["QPS"]) == pytest.approx(figures["qps"])
    assert statistics.fmean(series(vdb, "vdb-recall")["Recall %"]) == pytest.approx(figures["recall_percentage"])


@needs_chromium
def test_findings_are_validates_per_result(synthetic_page):
    pkg, findings = checker.validate(synthetic_page.root)
    for rel, section in sections(synthetic_page.dom).items():
        expected = [(f.severity, f.rule) for f in findings if pkg.result_of(f.path) == rel]
        shown = [(tr.attrs["data-severity"], tr.attrs["data-rule"]) for tr in section.has("data-severity")]
        assert shown == expected, rel
    vdb = sections(synthetic_page.dom)["closed/Acme/results/sys1/vector_database/milvus/HNSW"]
    assert "INVALID" in vdb.all("h2")[0].text


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
@needs_chromium
def test_published_packages(realdata_copy, tmp_path, cli, mpl_cache):
    """The uninitialised published copy, as a reviewer would: reportgen, then html; the page has
    reportgen's figures, rank 0's checkpoint rates whose mean is the published 3.0761 GiB/s,
    the five published QPS, the KV Options' means."""
    assert cli("reports", "reportgen", "--results-dir", realdata_copy).rc == 0
    page = tmp_path / "published.html"
    make_page(realdata_copy, page)
    text, console = chromium(page, tmp_path / "profile", "--dump-dom")
    assert console == []
    found = sections(dom(text))
    assert len(found) == len(checker.validate(realdata_copy)[0].results())
    for rel, section in found.items():
        benchmark = table_values(section, "meta")["benchmark"][0]
        if table_values(section, "meta")["runs"][0]:
            assert {k: v for k, (v, _) in table_values(section, "figures").items()} == \
                results_json(realdata_copy, rel, benchmark)["figures"], rel
    ckpt = series(found[f"{NEWFW}/checkpointing/llama3-8b"], "checkpoint-write")
    assert statistics.fmean(ckpt["20260713_104840"]) == pytest.approx(3.076140817854296, abs=1e-12)
    assert sorted(series(found[TTA], "vdb-qps")["QPS"]) == pytest.approx(sorted([57922.4, 57619.8, 58009.7, 59245.4, 57669.3]),
                                                                         abs=0.05)
    kv = found[f"{NEWFW}/kv_cache/llama3.1-8b"]
    assert [round(v, 2) for v in series(kv, "kv-bandwidth")["Read GiB/s"]] == [7.98, 1.79, 7.41]
    assert "per-trial results absent" in kv.text
    assert [round(v) for v in series(kv, "kv-p95")["End-to-end P95 ms"]] == [63368, 15143, 116385]  # summary.json


def test_where_the_page_may_go(tmp_path, cli, mpl_cache, monkeypatch):
    """Never inside the tree, never over a file without --force; a missing tree is exit 3; a
    result without results.json says how to get one; progress goes to stderr."""
    from mlpstorage_py import progress

    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    with synthetic_families.registered():
        root = synthetic.copy_package(tmp_path / "pkg", families=("checkpointing",))
    result = cli("reports", "html", "--results-dir", root, "--output", root / "page.html")
    assert result.rc == 2 and "inside the results tree" in result.err and not (root / "page.html").exists()
    (root / "closed/Acme/results/sys1/checkpointing/llama3-8b/results.json").unlink()
    result = cli("reports", "html", "--results-dir", root)  # default: ./pkg-report.html
    assert result.rc == 0 and "reports html: 1/1 results drawn" in result.err and "wrote" in result.out
    page = Path.cwd() / "pkg-report.html"
    assert "run <code>mlpstorage reports reportgen</code>" in page.read_text(encoding="utf-8")
    result = cli("reports", "html", "--results-dir", root)
    assert result.rc == 2 and "--force" in result.err
    assert cli("reports", "html", "--results-dir", root, "--force").rc == 0
    assert cli("reports", "html", "--results-dir", tmp_path / "absent").rc == 3


def test_values_a_run_lacks_are_gaps(tmp_path, mpl_cache):
    """NaN, infinity or text where a number belongs is a gap in the picture (never a zero, never
    a crash), and a run without the list is named in a note."""
    from mlpstorage_py.results.tree.package import Package
    from mlpstorage_py.report import html, plots

    with synthetic_families.registered():
        root = synthetic.copy_package(tmp_path / "pkg", families=("training",))
    runs = synthetic.leaves_of(root / "closed/Acme/results/sys1/training/unet3d/run")
    synthetic.edit_json(runs[1] / "summary.json", lambda d: d["metric"].update(
        train_throughput_samples_per_second=[float("nan"), float("inf"), "$\\frac{", 41.0, 42.0]))
    synthetic.edit_json(runs[2] / "summary.json", lambda d: d["metric"].pop("train_au_percentage"))
    leaves = [l for l in Package.load(root).leaves if l.command == "run"]
    throughput, au = plots.training(leaves)
    assert throughput.series[runs[1].name] == [None, None, None, 41.0, 42.0]
    assert runs[2].name not in au.series and any(runs[2].name in n for n in au.notes)
    page, counts = html.build(root)
    assert counts["charts"] == 2 and page.count("<svg") == 2


def test_without_matplotlib_one_line_and_nothing_written(tmp_path, cli, monkeypatch):
    """matplotlib is installed here, so its absence is simulated (find_spec says None)."""
    import importlib.util

    with synthetic_families.registered():
        root = synthetic.copy_package(tmp_path / "pkg", families=("checkpointing",))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    result = cli("reports", "html", "--results-dir", root, "-o", tmp_path / "page.html")
    assert result.rc == 1 and result.err_lines == [result.err_lines[0]] and "pip install matplotlib" in result.err
    assert not (tmp_path / "page.html").exists()


def test_a_broken_results_json_is_named_not_fatal(tmp_path, mpl_cache):
    from mlpstorage_py.report import html

    with synthetic_families.registered():
        root = synthetic.copy_package(tmp_path / "pkg", families=("checkpointing",))
    (root / "closed/Acme/results/sys1/checkpointing/llama3-8b/results.json").write_text("{not json", encoding="utf-8")
    page, counts = html.build(root)
    assert "results.json is unreadable" in page and counts["charts"] == 2
