"""validate groups findings by result (Rules 1.3) from one index of the package's results: the
same grouping as scanning every result per finding, without its quadratic cost."""

from __future__ import annotations

from mlpstorage_py import checker
from synthetic import make_package


def by_scan(pkg, path: str) -> str:
    """The definition: the first result, in order, that is the path or one of its parents."""
    for result in pkg.results():
        if path == str(result) or path.startswith(str(result) + "/"):
            return str(result.relative_to(pkg.root))
    return "package"


def test_result_of_matches_the_scan_and_indexes_once(tmp_path, monkeypatch):
    pkg, findings = checker.validate(make_package(tmp_path / "pkg"))
    results = pkg.results()
    probes = [f.path for f in findings] + [str(r) for r in results] + [str(results[0]) + "/x/y.json",
                                                                          str(results[0]) + "x", str(pkg.root), "/elsewhere"]
    expected = [by_scan(pkg, p) for p in probes]
    calls = []
    real = type(pkg).results
    monkeypatch.setattr(type(pkg), "results", lambda self: calls.append(1) or real(self))
    assert [pkg.result_of(p) for p in probes] == expected
    assert len(calls) <= 1
    assert "package" in expected and expected.count("package") < len(expected)
