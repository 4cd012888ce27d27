"""2.1.4 and 2.1.8 read Hydra's run.dir with HYDRA_RUN_DIR and rstrip; that must give what the
pattern first written for it gave (a lazy group before `\\s*$`), on generated Hydra-like texts
and the published hydra.yaml files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlpstorage_py.checker.rules_structure import HYDRA_RUN_DIR

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
AS_WRITTEN = re.compile(r"^\s*run:\s*\n\s+dir:[ \t]*(\S[^\n]*?)\s*$", re.M)
PIECES = st.sampled_from(["run:", "  run:", "xrun:", "run: x", "\n", " ", "\t", "dir:", "  dir: /out/a", "dir: ", "\x0b",
                          "hydra:", "    dir: 'b'  ", "sweep:", "  dir: c\n", "a", "\u2003", "#", "run:\n  dir: d \t"])


def run_dir(text: str) -> str | None:
    found = HYDRA_RUN_DIR.search(text)
    return found.group(1).rstrip() if found else None


def same(text: str) -> None:
    expected = AS_WRITTEN.search(text)
    assert run_dir(text) == (expected.group(1) if expected else None), repr(text)


@settings(max_examples=600, deadline=None)
@given(st.lists(PIECES, max_size=14).map("".join))
def test_generated_texts(text: str) -> None:
    same(text)


@pytest.mark.parametrize("text", ["hydra:\n  run:\n    dir: /results/a\n", "\n\n run:\n\n dir:x  \n\n", "run:\ndir: y",
                                  "xrun:\n  dir: no\nrun:\n  dir: yes \u2003\n", "  run: \n  dir:\n  dir: z", ""])
def test_hand_written(text: str) -> None:
    same(text)


@pytest.mark.skipif(not REALDATA.is_dir(), reason="no published packages at ../shared/realdata")
def test_published_hydra_files() -> None:
    texts = [p.read_text(errors="replace") for p in sorted(REALDATA.rglob("hydra.yaml"))]
    for text in texts:
        same(text[:4096])
    assert sum(run_dir(t) is not None for t in texts) >= 10
