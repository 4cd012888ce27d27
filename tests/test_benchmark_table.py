"""The benchmark table (mlpstorage_py/benchmarks/table.py) is the one list of benchmarks: the
command line offers exactly its rows, in its order, each row's class writes the tree name the
row gives and layout.yaml knows, its plan-only commands are commands the CLI has, its
filesystem rule is a rule of the index, and reading the table imports no benchmark."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
import yaml

from mlpstorage_py.benchmarks import table
from mlpstorage_py.benchmarks.base import Benchmark
from mlpstorage_py.cli import build_parser
from mlpstorage_py.cli.common import MODES
from mlpstorage_py.rules.configs import source_root


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _commands(bench: argparse.ArgumentParser) -> set[str]:
    """Every command name under a benchmark's parser (below its models, or directly)."""
    found: set[str] = set()
    for name, child in _choices(bench).items():
        if any(isinstance(a, argparse._SubParsersAction) for a in child._actions):
            found |= set(_choices(child))
        else:
            found.add(name)
    return found


@pytest.mark.parametrize("mode", list(MODES))
def test_the_cli_offers_exactly_the_rows(mode: str) -> None:
    benches = _choices(_choices(build_parser([mode]))[mode])
    assert list(benches) == [row.cli_name for row in table.BENCHMARKS]
    for row in table.BENCHMARKS:
        assert set(row.plan_only) <= _commands(benches[row.cli_name]), row.cli_name


def test_each_row_names_its_class_and_the_tree_name_it_writes() -> None:
    layout = yaml.safe_load((source_root() / "mlpstorage_py" / "rules" / "layout.yaml").read_text())
    rules = yaml.safe_load((source_root() / "mlpstorage_py" / "rules" / "rule_index.yaml").read_text())
    numbers = {entry["number"] for group in rules.values() if isinstance(group, list) for entry in group}
    assert [r.benchmark_type for r in table.BENCHMARKS] == list(layout["benchmarks"])
    for row in table.BENCHMARKS:
        cls = row.load()
        assert issubclass(cls, Benchmark) and cls.benchmark_type == row.benchmark_type
        assert row.fs_rule in numbers, row
    assert len({r.cli_name for r in table.BENCHMARKS}) == len(table.BENCHMARKS)


def test_object_storage_is_refused_for_the_rows_without_it(cli) -> None:
    res = cli("whatif", "vectordb", "HNSW", "datagen", "--num-vectors", "1000", "--dimension", "8", "object")
    assert res.rc != 0 and "object runs are training and checkpointing" in res.err
    assert table.object_storage_names() == "training and checkpointing"


def test_reading_the_table_imports_no_benchmark() -> None:
    code = ("import sys; from mlpstorage_py.benchmarks import table; table.row('kvcache');"
            "import json; print(json.dumps(sorted(m for m in sys.modules if m.startswith('mlpstorage_py.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["mlpstorage_py.benchmarks", "mlpstorage_py.benchmarks.table", "mlpstorage_py.errors"]


def test_a_missing_engine_module_is_not_available() -> None:
    from mlpstorage_py.errors import NotAvailable

    ghost = table.BENCHMARKS[0]._replace(module="mlpstorage_py.benchmarks.no_such_engine")
    with pytest.raises(NotAvailable, match="training benchmark's engine is not part of this build"):
        ghost.load()
