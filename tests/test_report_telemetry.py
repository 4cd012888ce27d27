"""`reports html`'s telemetry part (report/telemetry_figures.py), from hand-made telemetry/<host>.jsonl
and bottleneck.json in a leaf: every panel on one time axis, values where they belong in the SVG
(100 % at a panel's top, a rate's MiB/s, the progress curve's cumulative bytes), the phases
shaded where they ran, hostile names escaped, nothing for a leaf without telemetry, and the page
in a real headless Chromium, screenshot included."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

import synthetic
from mlpstorage_py.report import html, telemetry_figures as tf
from test_report_html import CHROMIUM, chromium, coloured, dom, make_page, sections

NS = "{http://www.w3.org/2000/svg}"
MIB = 2 ** 20
T0 = 1_800_000_000.0
HOSTILE = '<script>console.error("xss")</script>\x00&"'
CKPT = "closed/Acme/results/sys1/checkpointing/llama3-8b"


def sample(host: str, t: float, *, idle: float = 50.0, iowait: float = 10.0, used: float = 1000.0, dirty: float = 10.0,
           read: int = 0, write: int = 0, util: float = 50.0, rx: int = 0, tx: int = 0, dt: float = 1.0, **extra) -> dict:
    record = {"host": host, "t": t, "dt": dt, "cpus": 4,
              "cpu": {"user": 100 - idle - iowait, "system": 0.0, "iowait": iowait, "steal": 0.0, "idle": idle},
              "mem": {"total_mib": 8000.0, "used_mib": used, "cache_mib": 100.0, "dirty_mib": dirty, "writeback_mib": 0.0},
              "net": {"eth0": {"rx_bytes": rx, "rx_packets": 1, "tx_bytes": tx, "tx_packets": 1, "speed_mbps": 10000}},
              "disks": {"vda": {"read_bytes": read, "write_bytes": write, "reads": 1, "writes": 1, "util_pct": util,
                                "queue_depth": 1.0}}}
    record.update(extra)
    return record


def write_leaf(leaf: Path, hosts: dict[str, list[dict]], phases: list[dict] | None = None) -> Path:
    folder = leaf / "telemetry"
    folder.mkdir(parents=True, exist_ok=True)
    for index, (host, rows) in enumerate(hosts.items()):
        (folder / f"h{index}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if phases is not None:
        (folder / "bottleneck.json").write_text(json.dumps(phases), encoding="utf-8")
    return leaf


def phase(name: str, start: float, end: float, saturated: list[str] = (), limited: bool = False) -> dict:
    return {"job": "engine", "phase": name, "start": start, "end": end, "clients_limited": limited,
            "saturated": [{"what": "device", "host": "a", "figure": 95.0, "limit": 90.0, "text": t} for t in saturated],
            "summary": "; ".join(saturated) or "nothing saturated on the clients", "hosts": {"a": {"samples": 2}}}


def part(leaf: Path) -> tuple[str, int]:
    return tf.section([SimpleNamespace(path=leaf, summary=None)], "r1")


def svg_of(text: str) -> ET.Element:
    (found,) = re.findall(r"<svg .*?</svg>", text, re.S)
    return ET.fromstring(found)


def frame(root: ET.Element, panel: str) -> tuple[float, float, float, float]:
    (rect,) = [r for r in root.iter(f"{NS}rect") if r.get("data-frame") == panel]
    x, y, w, h = (float(rect.get(k)) for k in ("x", "y", "width", "height"))
    return x, y, x + w, y + h


def points(root: ET.Element, panel: str, host: str, measure: str) -> list[tuple[float, float]]:
    found = []
    for line in root.iter(f"{NS}polyline"):
        if (line.get("data-panel"), line.get("data-host"), line.get("data-measure")) == (panel, host, measure):
            found.append([tuple(map(float, p.split(","))) for p in line.get("points").split()])
    return [p for run in found for p in run]


def at(found: list[tuple[float, float]], y: float) -> bool:
    """Every point at height y (to the SVG's 0.1 pt rounding)."""
    return bool(found) and all(abs(v - y) < 0.06 for _, v in found)


@pytest.fixture
def two_hosts(tmp_path) -> tuple[Path, ET.Element]:
    """Host a: four 1 s samples from T0, CPU 100 % busy in the third, 100 MiB written per second;
    host b: starting 2 s later, 0 % busy, 50 MiB/s read. A write phase over [T0+1, T0+3]."""
    a = [sample("a", T0 + i, idle=0.0 if i == 3 else 60.0, iowait=0.0 if i == 3 else 20.0, write=100 * MIB, util=100.0)
         for i in range(1, 5)]
    b = [sample("b", T0 + i, idle=100.0, iowait=0.0, read=50 * MIB, rx=10 * MIB) for i in range(3, 7)]
    leaf = write_leaf(tmp_path / "leaf", {"a": a, "b": b},
                      [phase("engine: write", T0 + 1, T0 + 3, ["device vda on a at 100 % utilisation"])])
    text, drawn = part(leaf)
    assert drawn == 1
    return leaf, svg_of(text)


def test_every_panel_shares_one_time_axis(two_hosts):
    _, root = two_hosts
    frames = {r.get("data-frame"): frame(root, r.get("data-frame")) for r in root.iter(f"{NS}rect") if r.get("data-frame")}
    assert list(frames) == ["progress", "cpu", "memory", "disk-vda", "util-vda", "net-eth0"]
    assert len({(f[0], f[2]) for f in frames.values()}) == 1  # one left and one right edge for all
    tops = [f[1] for f in frames.values()]
    assert tops == sorted(tops)  # stacked, top to bottom
    left, _, right, _ = frames["cpu"]
    span = 6.0  # the first sample began at T0 (a's interval T0..T0+1), the last ended at T0+6
    busy_a, busy_b = points(root, "cpu", "a", "busy %"), points(root, "cpu", "b", "busy %")
    # each rate is drawn at its interval's middle: a at 0.5 .. 3.5 s, b (2 s later) at 2.5 .. 5.5 s
    assert [x for x, _ in busy_a] == pytest.approx([left + (i + 0.5) / span * (right - left) for i in range(4)], abs=0.06)
    assert [x for x, _ in busy_b] == pytest.approx([left + (i + 2.5) / span * (right - left) for i in range(4)], abs=0.06)


def test_a_full_cpu_reaches_the_panel_top_and_an_idle_one_its_bottom(two_hosts):
    _, root = two_hosts
    _, top, _, bottom = frame(root, "cpu")
    busy_a = points(root, "cpu", "a", "busy %")
    assert busy_a[2][1] == pytest.approx(top, abs=0.06)  # the third sample: idle 0, iowait 0
    assert busy_a[0][1] == pytest.approx(bottom - 0.2 * (bottom - top), abs=0.06)  # 20 % busy
    assert at(points(root, "cpu", "b", "busy %"), bottom)
    iowait = points(root, "cpu", "a", "iowait %")
    assert iowait[0][1] == pytest.approx(bottom - 0.2 * (bottom - top), abs=0.06)
    assert at(points(root, "util-vda", "a", "utilisation %"), frame(root, "util-vda")[1])


def test_rates_and_the_progress_curve_follow_the_bytes(two_hosts):
    _, root = two_hosts
    _, top, _, bottom = frame(root, "disk-vda")  # a writes 100 MiB/s, b reads 50: the axis tops at 100
    assert at(points(root, "disk-vda", "a", "written MiB/s"), top)
    assert at(points(root, "disk-vda", "b", "read MiB/s"), (top + bottom) / 2)
    assert at(points(root, "disk-vda", "a", "read MiB/s"), bottom)
    # progress: a's devices moved 4 x 100 MiB = 0.390625 GiB in steps, from 0 where its first interval began
    left, top, right, bottom = frame(root, "progress")
    progress = points(root, "progress", "a", "devices GiB")
    assert progress[0] == pytest.approx((left, bottom), abs=0.06)
    heights = [(bottom - y) for _, y in progress]  # the axis tops at the round 0.4 GiB
    assert heights == pytest.approx([(bottom - top) * k * 100 / 1024 / 0.4 for k in range(5)], abs=0.06)
    ticks = [float(t.get("y1")) for t in root.iter(f"{NS}line") if t.get("x2") == f"{left:.2f}"
             and float(t.get("x1")) < left and top - 0.1 <= float(t.get("y1")) <= bottom + 0.1]
    assert len(ticks) >= 3  # round ticks: 0, 0.2, 0.4 GiB
    net = points(root, "progress", "b", "network GiB")
    assert net[-1][1] < bottom and points(root, "progress", "a", "network GiB")[-1][1] == pytest.approx(bottom, abs=0.06)


def test_the_phases_are_shaded_where_they_ran_and_summarised(two_hosts):
    leaf, root = two_hosts
    left, top, right, bottom = frame(root, "cpu")
    shaded = [r for r in root.iter(f"{NS}rect") if r.get("fill") == tf.PHASE_FILL["saturated"]]
    strip = [r for r in shaded if r.get("data-phase") == "engine: write"]
    assert len(strip) == 1 and len(shaded) == 1 + 6  # the strip's box and one band per panel
    for rect in shaded:
        assert float(rect.get("x")) == pytest.approx(left + 1 / 6 * (right - left), abs=0.06)
        assert float(rect.get("width")) == pytest.approx(2 / 6 * (right - left), abs=0.06)
    text, _ = part(leaf)
    doc = dom(text)
    (table,) = doc.all("table", **{"class": "bottleneck"})
    row = [json.loads(td.attrs["data-value"]) for td in table.all("tr")[1].all("td")]
    assert row[:5] == [1, "engine: write", 1.0, 3.0, 2.0]
    assert row[7] == "device vda on a at 100 % utilisation"
    assert "derived from the telemetry" in doc.all("figcaption")[0].text


def test_a_leaf_without_telemetry_gets_no_part(tmp_path):
    leaf = tmp_path / "leaf"
    leaf.mkdir()
    assert part(leaf) == ("", 0)
    (leaf / "telemetry").mkdir()
    assert part(leaf) == ("", 0)  # an empty directory: nothing either
    other = tmp_path / "elsewhere"
    write_leaf(other, {"a": [sample("a", T0 + 1), sample("a", T0 + 2)]})
    (leaf / "telemetry").rmdir()
    (leaf / "telemetry").symlink_to(other / "telemetry")
    text, drawn = part(leaf)
    assert drawn == 0 and "<svg" not in text and "symbolic link" in text  # a link is named, never followed


def test_a_package_without_telemetry_has_no_telemetry_part(tmp_path):
    root = synthetic.copy_package(tmp_path / "pkg", families=("checkpointing",))
    page, counts = html.build(root)
    assert 'class="telemetry"' not in page
    write_leaf(synthetic.leaves_of(root / CKPT)[0], {"a": [sample("a", T0 + 1), sample("a", T0 + 2)]})
    page2, counts2 = html.build(root)
    assert page2.count('class="telemetry"') == 1 and counts2["charts"] == counts["charts"] + 1


def test_hostile_names_and_values_are_data(tmp_path):
    rows = [sample(HOSTILE, T0 + i, idle=float("nan") if i == 2 else 50.0, util="lots", used=True, dirty=1e300,
                   disks={HOSTILE: {"read_bytes": MIB, "write_bytes": "x", "util_pct": 10.0}},
                   net={"</svg>": {"rx_bytes": MIB, "tx_bytes": None}}) for i in range(1, 5)]
    rows.append({"host": "h", "t": float("inf")})  # no time: skipped
    leaf = write_leaf(tmp_path / "leaf", {HOSTILE: rows}, [phase(HOSTILE, T0 + 1, T0 + 2), phase("late", T0 + 90, T0 + 99),
                                                           {"phase": 5, "start": "x"}, "not a record"])
    with (leaf / "telemetry" / "h0.jsonl").open("a") as out:
        out.write("not json\n[1, 2]\n")
    text, drawn = part(leaf)
    assert drawn == 1
    assert "<script" not in text and "&lt;script&gt;" in text and "\x00" not in text
    root = svg_of(text)  # parses: nothing from the file reached the markup
    assert root.find(f".//{NS}script") is None
    clean = HOSTILE.replace("\x00", "?")
    assert {p.get("data-host") for p in root.iter(f"{NS}polyline")} == {clean}
    assert [r.get("data-phase") for r in root.iter(f"{NS}rect") if r.get("data-phase")] == [clean]
    busy = [p for p in root.iter(f"{NS}polyline") if p.get("data-measure") == "busy %"]
    assert len(busy) == 2  # the NaN sample is a gap
    assert "phases not drawn (no span inside the sampled time): 2, 3" in text
    for line in root.iter(f"{NS}polyline"):
        assert all(math.isfinite(float(v)) for p in line.get("points").split() for v in p.split(","))


def test_many_samples_are_thinned_and_a_huge_file_is_named_not_read(tmp_path, monkeypatch):
    leaf = write_leaf(tmp_path / "leaf", {"a": [sample("a", T0 + i * 0.5, dt=0.5) for i in range(1, 1001)]})
    root = svg_of(part(leaf)[0])
    assert len(points(root, "cpu", "a", "busy %")) <= tf.MAX_POINTS
    monkeypatch.setattr(tf, "MAX_FILE_BYTES", 1000)
    text, drawn = part(leaf)
    assert drawn == 0 and "telemetry/h0.jsonl is 459 KiB, over the 1000 bytes this page reads" in text


# --- the page in Chromium ---------------------------------------------------------------------

@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
def test_the_page_in_chromium_shows_the_telemetry(tmp_path):
    """A checkpointing leaf with two hosts' telemetry over a write and a read phase: the page
    loads without a console message, the hosts' colours and the phases' shading show in the
    screenshot (kept as telemetry.png in the test's directory)."""
    root = synthetic.copy_package(tmp_path / "pkg", families=("checkpointing",))
    leaf = synthetic.leaves_of(root / CKPT)[0]
    hosts = {}
    for h, host in enumerate(("client-1", "client-2")):
        rows = []
        for i in range(1, 61):
            writing = i <= 28
            wave = math.sin(i / 4 + h)
            rows.append(sample(host, T0 + i, idle=max(0.0, 30 - 20 * wave), iowait=20 + 10 * wave, used=2000 + 30 * i,
                               dirty=400 * writing, write=int((900 + 200 * wave) * MIB) * writing,
                               read=int((1200 + 150 * wave) * MIB) * (i > 32), util=85 + 10 * wave * (i not in (29, 30, 31)),
                               rx=int((100 + 40 * wave) * MIB), tx=int(60 * MIB)))
        hosts[host] = rows
    write_leaf(leaf, hosts, [phase("engine: write", T0 + 0.5, T0 + 28.5, ["device vda on client-1 at 95 % utilisation"]),
                             phase("engine: read", T0 + 32, T0 + 60, limited=True,
                                   saturated=["client CPU busy 92 % on client-2"]),
                             phase(HOSTILE, T0 + 29, T0 + 31)])
    page = tmp_path / "report.html"
    make_page(root, page)
    text, console = chromium(page, tmp_path / "profile", "--dump-dom")
    assert console == []
    doc = dom(text)
    (telemetry,) = sections(doc)[CKPT].all("section", **{"class": "telemetry"})
    assert telemetry.all("figure", data_chart="telemetry")[0].all("svg")
    assert HOSTILE.replace("\x00", "?") in telemetry.all("table", **{"class": "bottleneck"})[0].text
    shot = tmp_path / "telemetry.png"
    # the page down to the telemetry part: the section's offset is unknown to a screenshot, so a tall window
    chromium(page, tmp_path / "profile", "--window-size=1200,3400", f"--screenshot={shot}")
    assert coloured(shot, (31, 119, 180)) > 2000 and coloured(shot, (255, 127, 14)) > 2000  # the hosts' lines
    shading = tuple(int(tf.PHASE_FILL["saturated"][i:i + 2], 16) for i in (1, 3, 5))
    assert coloured(shot, shading) > 20000  # the write phase's bands


def test_a_sample_or_phase_of_an_unknown_version_is_named_not_drawn(tmp_path):
    """results/bottleneck.py's schemas: the samples and records of before their version are drawn,
    those of a version this tool does not read are named in a note and left out."""
    rows = [sample("a", T0 + 1), sample("a", T0 + 2, schema_version=1), sample("a", T0 + 3, schema_version=9)]
    leaf = write_leaf(tmp_path / "leaf", {"a": rows}, [phase("p1", T0 + 1, T0 + 2), {**phase("p2", T0, T0 + 3), "schema_version": 9}])
    text, drawn = part(leaf)
    assert drawn == 1
    assert "1 telemetry samples are not drawn: telemetry sample records schema version 9, which this tool" in text
    assert "a bottleneck record is not shown: bottleneck records schema version 9" in text
    assert "p1" in text and "p2" not in text
