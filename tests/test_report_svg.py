"""The charts of `reports html`, drawn as SVG directly (plots.svg): what each one shows, and
that a page of many charts is well formed (every id once, every glyph reference resolves)."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET

import pytest

import synthetic
import synthetic_families
from mlpstorage_py.report import html, plots

NS = "{http://www.w3.org/2000/svg}"


def chart(kind: str = "line", **series: list) -> plots.Chart:
    categories = [str(i) for i in range(1, 1 + max(len(v) for v in series.values()))]
    return plots.Chart("k", "A title", "GiB/s", "checkpoint", kind, categories, dict(series))


def parsed(text: str) -> ET.Element:
    return ET.fromstring(text)


def test_a_line_has_a_marker_per_value_and_a_gap_where_one_is_missing():
    root = parsed(plots.svg(chart(a=[1.0, 2.0, None, 4.0, 5.0]), "c1"))
    assert root.tag == f"{NS}svg" and root.get("viewBox") == "0 0 547.2 230.4"
    polylines = root.findall(f".//{NS}polyline")
    assert [len(p.get("points").split()) for p in polylines] == [2, 2]  # split at the gap, never drawn through 0
    assert len(root.findall(f".//{NS}circle")) == 4
    assert {p.get("stroke") for p in polylines} == {plots.COLOURS[0]}


def test_values_rise_upward_and_stay_inside_the_axes():
    root = parsed(plots.svg(chart(a=[1.0, 3.0, 2.0]), "c1"))
    frame = [r for r in root.findall(f".//{NS}rect") if r.get("fill") == "none"][0]
    top, height = float(frame.get("y")), float(frame.get("height"))
    ys = [float(c.get("cy")) for c in root.findall(f".//{NS}circle")]
    assert ys[1] < ys[2] < ys[0]  # 3 is highest on the page, 1 lowest
    assert all(top < y < top + height for y in ys)


def test_bars_stand_on_zero_and_skip_a_missing_value():
    root = parsed(plots.svg(chart("bar", read=[2.0, None, 4.0], write=[1.0, 1.5, 2.0]), "c1"))
    bars = [r for r in root.findall(f".//{NS}rect") if r.get("fill") in plots.COLOURS[:2] and float(r.get("width")) > 14]
    assert len(bars) == 5
    bottoms = {round(float(r.get("y")) + float(r.get("height")), 1) for r in bars}
    assert len(bottoms) == 1  # one baseline: zero
    heights = {r.get("fill"): [] for r in bars}
    for r in bars:
        heights[r.get("fill")].append(float(r.get("height")))
    assert heights[plots.COLOURS[0]][1] == pytest.approx(2 * heights[plots.COLOURS[0]][0], rel=1e-3)


def test_several_series_get_a_legend_and_dashed_warm_up():
    c = chart(warm=[1.0, 2.0], run=[1.5, 2.5])
    c.dashed.add("warm")
    root = parsed(plots.svg(c, "c1"))
    dashed = [e for e in root.iter() if e.get("stroke-dasharray")]
    assert len(dashed) == 2 and {e.get("stroke") for e in dashed} == {plots.COLOURS[0]}  # the line and its legend handle
    handles = [e for e in root.findall(f".//{NS}line") if e.get("stroke") in plots.COLOURS]
    assert [h.get("stroke") for h in handles] == list(plots.COLOURS[:2])
    single = parsed(plots.svg(chart(a=[1.0, 2.0]), "c2"))
    assert [e for e in single.findall(f".//{NS}line") if e.get("stroke") in plots.COLOURS] == []  # one series: no legend


@pytest.mark.parametrize(("low", "high"), [(0, 1e9), (2.5e9, 2.6e9), (0, 3e-4), (57619, 59245), (2.85, 3.15),
                                           (97.2, 97.9), (-1, 1), (0.0049, 0.0051)])
def test_tick_labels_are_distinct_round_and_inside_the_axis(low, high):
    ticks, labels = plots._axis(low, high)
    assert 4 <= len(ticks) <= 9
    assert low - 1e-9 * abs(low) <= ticks[0] and ticks[-1] <= high + 1e-9 * abs(high)
    assert len(set(labels)) == len(labels), labels
    assert all(float(label) == pytest.approx(tick, rel=1e-6, abs=1e-12) for tick, label in zip(ticks, labels))
    if low < 0 < high:
        assert "0" in labels


def test_text_is_outlines_and_every_reference_resolves():
    text = plots.svg(chart(a=[1.0, 2.0]), "c1")
    assert "<text" not in text and "<script" not in text and "http" not in text.replace("http://www.w3.org/2000/svg", "")
    defined = set(re.findall(r'<path id="([^"]+)"', text))
    used = set(re.findall(r'<use href="#([^"]+)"', text))
    assert used and used <= defined and all(i.startswith("c1-") for i in defined)
    assert plots.svg(chart(a=[1.0, 2.0]), "c1") == text  # deterministic


def test_untrusted_labels_are_drawn_not_interpreted():
    c = plots.Chart("k", "t", "y", "x", "bar", ['<script>x</script>\x00"&\u4e2d'], {"</svg>": [1.0]})
    c.series["b"] = [2.0]
    root = parsed(plots.svg(c, "c1"))  # parses: nothing from the labels reached the markup
    assert root.find(f".//{NS}script") is None


def test_a_page_of_many_charts_has_every_id_once(tmp_path):
    with synthetic_families.registered():
        root = synthetic.copy_package(tmp_path / "pkg", families=("training", "checkpointing"))
    results = root / "closed" / "Acme" / "results"
    shutil.copytree(results / "sys1", results / "sys2")
    for ext in ("yaml", "pdf"):
        shutil.copyfile(root / "closed/Acme/systems" / f"sys1.{ext}", root / "closed/Acme/systems" / f"sys2.{ext}")
    page, counts = html.build(root)
    assert counts["charts"] == 8 and page.count("<svg") == 8
    ids = re.findall(r' id="([^"]+)"', page)
    assert len(ids) == len(set(ids))
    assert set(re.findall(r'<use href="#([^"]+)"', page)) <= set(ids)
