"""Figures the fault, fuzz and bad-input suites measure: printed by each test, and appended as
one JSON line to $MLPS_FIGURES when bench/faults.py collects them across a run."""

from __future__ import annotations

import json
import os
from typing import Any


def record(kind: str, tried: int, clean: int, **detail: Any) -> None:
    """kind: "fault", "fuzz" or "bad-input"; tried cases and how many ended cleanly."""
    line = {"kind": kind, "tried": tried, "clean": clean, **detail}
    print(f"\nfigures: {json.dumps(line, sort_keys=True)}")
    target = os.environ.get("MLPS_FIGURES")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, sort_keys=True) + "\n")
