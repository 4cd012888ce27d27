"""`reports html`'s I/O trace section (report/trace_figures.py), from hand-made io_trace.json
records in a synthetic package's leaves: the figures per host and device, the percentile rules
where their buckets end, the tables, the escaping of what a traced process called itself, and
nothing at all for a leaf that was not traced."""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import synthetic
from mlpstorage_py.report import html, plots
from mlpstorage_py.results import io_trace
from test_report_html import CHROMIUM, Node, chromium, dom, sections

NS = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>console.error("xss")</script>'
CKPT = "closed/Acme/results/sys1/checkpointing/llama3-8b"
TRAINING = "closed/Acme/results/sys1/training/unet3d"
SIZES = ["4K", "8K", "16K", "32K", "64K", "128K", "256K", "512K", "1M"]
LATENCIES = ["64us", "128us", "256us", "512us", "1.02ms", "2.05ms"]


def _op(requests: int, moved: int, sizes: dict[str, int], latency: dict[str, int], sequential: float | None) -> dict:
    return {"requests": requests, "bytes": moved, "size_hist": sizes, "latency_us_hist": latency,
            "p50_us": io_trace.percentile(latency, 0.5), "p95_us": io_trace.percentile(latency, 0.95),
            "p99_us": io_trace.percentile(latency, 0.99), "sequential_share": sequential}


def _device(level: str = "block") -> dict:
    return {"level": level,
            "read": _op(40, 40 * 4096 + 0, {"4096": 10, "131072": 30}, {"64": 50, "128": 40, "512": 9, "2048": 1}, 0.75),
            "write": _op(5, 5 << 20, {"1048576": 5}, {"256": 25}, 1.0),  # latencies: at least io_trace.MIN_SAMPLES
            "flush": _op(2, 0, {}, {"16": 2}, None),
            "queue_depth": [[0.5, 1.0], [1.5, 4.0], [2.5, 2.0], [3.5, 8.0]], "read_share_bytes": 0.5}


def _stream(pid: int, comm: str, device: str, moved: int, **extra: object) -> dict:
    ops = {op: {"requests": 1, "bytes": moved if op == "write" else 0, "size_hist": {}, "sequential_share": None}
           for op in io_trace.OPS}
    return {"pid": pid, "comm": comm, "device": device, "kernel_thread": False, "ops": ops, "in_flight_mean": 1.0, **extra}


def block_trace() -> dict:
    """Two hosts, one disk each, the ranks' streams tagged; the hostile comm is the biggest stream."""
    hosts = {}
    for i, (host, disk) in enumerate((("h0", "vda"), ("h1", "vdb"))):
        hosts[host] = {"hostname": f"node{i}", "complete": True,
                       "paths": [{"path": "/data", "level": "block", "devices": [{"name": disk, "dev": 1, "level": "block"}],
                                  "why": ""}],
                       "devices": {disk: _device()},
                       "streams": [_stream(100 + i, HOSTILE if i == 0 else "python3", disk, (9 - i) << 20, rank=i, work=i == 0)]}
    writeback = dict(_stream(7, "kworker/u8:1", "vda", 3 << 20), kernel_thread=True)
    return {"schema": 1, "level": "block", "why": "", "duration_s": 4.0, "data_paths": ["/data"], "complete": True,
            "hosts": hosts, "unattributed": {"devices": {"vda": _device()}, "streams": [writeback],
                                             "hostnames": ["node9"], "why": "kernel writeback"}}


def vfs_trace() -> dict:
    """One host, a tmpfs traced at the VFS level, its tracer cut short."""
    device = _device("vfs")
    return {"schema": 1, "level": "vfs", "why": f"tmpfs has no disk {HOSTILE}", "duration_s": 2.0,
            "data_paths": ["/dev/shm/x"], "complete": False,
            "hosts": {"localhost": {"hostname": "box", "complete": False, "error": "the tracer did not print its maps",
                                    "paths": [], "devices": {"tmpfs:/dev/shm": device},
                                    "streams": [_stream(5, "python3", "tmpfs:/dev/shm", 1 << 20)]}},
            "unattributed": {"devices": {}, "streams": [], "hostnames": [], "why": "kernel writeback"}}


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> tuple[Path, str, str]:
    """(package, page before any trace, page with the block trace in the first checkpointing
    leaf and the vfs trace in the second training run)."""
    root = synthetic.copy_package(tmp_path_factory.mktemp("trace") / "pkg", families=("training", "checkpointing"))
    before, _ = html.build(root)
    (synthetic.leaves_of(root / CKPT)[0] / io_trace.FILE).write_text(json.dumps(block_trace()), encoding="utf-8")
    (synthetic.leaves_of(root / TRAINING / "run")[1] / io_trace.FILE).write_text(json.dumps(vfs_trace()), encoding="utf-8")
    after, _ = html.build(root)
    return root, before, after


def _figure(div: Node, key: str) -> Node:
    (figure,) = div.all("figure", data_chart=key)
    return figure


def _plotted(figure: Node) -> tuple[list[str], dict[str, list]]:
    (table,) = figure.all("table", **{"class": "series"})
    head = [th.text for th in table.all("tr")[0].all("th")][1:]
    return head, {tr.attrs["data-series"]: [json.loads(td.attrs["data-value"]) for td in tr.all("td")]
                  for tr in figure.has("data-series")}


def _svg(figure: Node, page: str) -> ET.Element:
    """The figure's <svg>, parsed from the page text (the small DOM keeps no SVG markup)."""
    (svg,) = figure.all("svg")
    title = svg.all("title")[0].text
    found = [ET.fromstring(s) for s in re.findall(r"<svg .*?</svg>", page)]
    (root,) = [s for s in found if s.find(f"{NS}title").text == title]
    return root


def _rows(table: Node) -> list[list]:
    return [[json.loads(td.attrs["data-value"]) for td in tr.all("td")] for tr in table.all("tr")[1:]]


def test_each_host_and_device_gets_its_figures_and_table(pages):
    _, _, page = pages
    (trace,) = sections(dom(page))[CKPT].all("section", **{"class": "io-trace"})
    devices = trace.all("div", **{"class": "trace-device"})
    assert [(d.attrs["data-host"], d.attrs["data-device"]) for d in devices] == [("h0", "vda"), ("h1", "vdb")]
    for div in devices:
        charts = [f.attrs["data-chart"] for f in div.all("figure")]
        assert charts == ["trace-size", "trace-latency-read", "trace-latency-write", "trace-latency-flush",
                          "trace-queue-depth"]
        assert all(len(f.all("svg")) == 1 for f in div.all("figure"))
        head, series = _plotted(_figure(div, "trace-size"))
        assert head == SIZES  # every log2 bucket between the smallest and the largest, zeros kept
        assert series == {"read": [10, 0, 0, 0, 0, 30, 0, 0, 0], "write": [0] * 8 + [5]}
        head, series = _plotted(_figure(div, "trace-latency-read"))
        assert head == LATENCIES and series == {"read": [50, 40, 0, 9, 0, 1]}
        head, series = _plotted(_figure(div, "trace-queue-depth"))
        assert head == ["0.5", "1.5", "2.5", "3.5"]  # the run's 4 s in 4 slices
        assert series == {"mean in flight": [1.0, 4.0, 2.0, 8.0], "highest point": [1.0, 4.0, 2.0, 8.0]}
        (ops,) = div.all("table", **{"class": "trace-ops"})
        rows = {r[0]: r[1:] for r in _rows(ops)}
        assert rows["read"] == [40, 40 * 4096, pytest.approx(40 * 4096 / (40 * 4096 + (5 << 20)), abs=1e-4), 0.75,
                                128.0, 1024.0, 1024.0]
        assert rows["write"][:2] == [5, 5 << 20] and rows["flush"][2:4] == [None, None]
    assert "5 MiB" in devices[0].text


def test_percentiles_are_rules_where_their_bucket_ends(pages):
    _, _, page = pages
    div = sections(dom(page))[CKPT].all("div", **{"class": "trace-device"})[0]
    figure = _figure(div, "trace-latency-read")
    svg = _svg(figure, page)
    marks = {line.get("data-mark"): float(line.get("x1")) for line in svg.iter(f"{NS}line") if line.get("data-mark")}
    assert list(marks) == ["p50 ≤ 128us", "p95, p99 ≤ 1.02ms"]  # p95 and p99 share their bucket: one rule
    bars = sorted((float(r.get("x")), float(r.get("x")) + float(r.get("width")))
                  for r in svg.iter(f"{NS}rect") if r.get("fill") == plots.COLOURS[0])
    assert len(bars) == len(LATENCIES)
    assert bars[0][1] < marks["p50 ≤ 128us"] < bars[1][0]  # after the 64 us bucket: p50 is its upper bound
    assert bars[3][1] < marks["p95, p99 ≤ 1.02ms"] < bars[4][0]  # after 512 us
    assert "p50 ≤ 128us; p95 ≤ 1.02ms; p99 ≤ 1.02ms" in figure.text
    # every write took 256-511 us: the bucket their bound opens is drawn empty, the rule between the two
    write = _figure(div, "trace-latency-write")
    assert _plotted(write) == (["256us", "512us"], {"write": [25, 0]})
    svg = _svg(write, page)
    (mark,) = [float(line.get("x1")) for line in svg.iter(f"{NS}line") if line.get("data-mark") == "p50, p95, p99 ≤ 512us"]
    bars = sorted(float(r.get("x")) for r in svg.iter(f"{NS}rect") if r.get("fill") == plots.COLOURS[0])
    assert bars[0] < mark < bars[1]


def test_level_why_unattributed_completeness_and_streams(pages):
    _, _, page = pages
    found = sections(dom(page))
    block = found[CKPT].all("section", **{"class": "io-trace"})[0]

    def facts(node: Node, css: str) -> dict:
        return {tr.attrs["data-key"]: json.loads(tr.all("td")[0].attrs["data-value"])
                for tr in node.all("table", **{"class": css})[0].all("tr")}

    assert facts(block, "trace-about") == {"level": "block", "why": "", "complete": True, "duration_s": 4.0,
                                           "data_paths": ["/data"], "hosts": ["h0", "h1"]}
    assert facts(block, "trace-unattributed") == {"why": "kernel writeback", "hostnames": ["node9"], "devices": ["vda"]}
    assert _rows(block.all("table", **{"class": "trace-unattributed-ops"})[0])[1] == ["write", 5, 5 << 20]
    streams = _rows(block.all("table", **{"class": "trace-streams"})[0])
    assert [(s[0], s[1], s[2], s[4], s[5], s[6], s[8]) for s in streams] == [
        ("h0", 100, HOSTILE, 0, True, False, 9 << 20), ("h1", 101, "python3", 1, False, False, 8 << 20),
        ("unattributed", 7, "kworker/u8:1", None, False, True, 3 << 20)]
    vfs = found[TRAINING].all("section", **{"class": "io-trace"})[0]
    about = facts(vfs, "trace-about")
    assert about["level"] == "vfs" and about["why"] == f"tmpfs has no disk {HOSTILE}" and about["complete"] is False
    assert facts(vfs, "trace-host-facts") == {"hostname": "box", "complete": False,
                                              "error": "the tracer did not print its maps"}
    assert "(vfs level)" in vfs.all("div", **{"class": "trace-device"})[0].all("h4")[0].text


def test_untrusted_text_is_escaped(pages):
    _, _, page = pages
    assert "<script" not in page and "&lt;script&gt;console.error" in page
    for svg in re.findall(r"<svg .*?</svg>", page):
        ET.fromstring(svg)  # every chart parses: no label reached the markup


def test_untraced_leaves_add_nothing(pages):
    root, before, after = pages
    assert "io-trace" not in before
    traced = {rel: [s.attrs["data-leaf"] for s in node.all("section", **{"class": "io-trace"})]
              for rel, node in sections(dom(after)).items()}
    assert traced == {CKPT: [synthetic.leaves_of(root / CKPT)[0].name],
                      TRAINING: [synthetic.leaves_of(root / TRAINING / "run")[1].name]}
    assert re.sub(r'<section class="io-trace".*?</section>', "", after, flags=re.S) == before
    ids = re.findall(r' id="([^"]+)"', after)
    assert len(ids) == len(set(ids))


def test_malformed_values_are_blanks_not_a_crash(tmp_path):
    """Every field of the wrong type: the section still renders, with blanks and notes."""
    root = synthetic.copy_package(tmp_path / "pkg", families=("checkpointing",))
    bad = copy.deepcopy(block_trace())
    device = bad["hosts"]["h0"]["devices"]["vda"]
    device["read"]["size_hist"] = {"x": 1, "16": "many", "-4": 2, "8": 1, str(2 ** 300): 1}
    device["read"]["latency_us_hist"] = []
    device["queue_depth"] = [[1], "a", [float("nan"), 1]]
    bad["hosts"]["h1"] = "not a host"
    bad["unattributed"] = None
    (synthetic.leaves_of(root / CKPT)[0] / io_trace.FILE).write_text(json.dumps(bad), encoding="utf-8")
    page, _ = html.build(root)
    div = sections(dom(page))[CKPT].all("div", **{"class": "trace-device"})[0]
    head, series = _plotted(_figure(div, "trace-size"))
    assert head[:2] == ["8", "16"] and len(head) == 80 and series["read"][:2] == [1, 0]
    assert "no queue-depth points recorded" in _figure(div, "trace-queue-depth").text


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
def test_the_traced_page_loads_without_console_messages(pages, tmp_path):
    _, _, page = pages
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    text, console = chromium(path, tmp_path / "profile", "--dump-dom")
    assert console == []
    streams = dom(text).all("table", **{"class": "trace-streams"})[0]
    assert streams.all("tr")[1].all("td")[2].text == HOSTILE  # shown as text, never run
