"""Whether a leaf's run finished, from its own records: what status, submit, runs and reportgen
all go by.

The metadata is written last (benchmarks/lifecycle.py), with exit_status and failure, so a
leaf without its end record was cut short (SIGKILL, power loss) and is `incomplete`; one that
records a failure is `failed`. Leaves made by the reference tool (published packages) carry no
exit_status: their metadata's end time or runtime, or, where the metadata is not kept, the
engine's summary.json, says they finished; a leaf of this tool's (it holds mlpstorage.log)
with a summary.json but no metadata is `incomplete`: the engine finished, the tool was stopped
before it checked what the engine wrote.
"""

from __future__ import annotations

from mlpstorage_py.results.logs import LOG_FILE
from mlpstorage_py.results.tree import files
from mlpstorage_py.results.tree.package import Leaf

OK, FAILED, INCOMPLETE, EXTRA = "ok", "failed", "incomplete", "extra"
RUNNING = ("running", "started")


def state(leaf: Leaf) -> tuple[str, str]:
    """(ok | failed | incomplete, why) from the leaf's own records."""
    meta = leaf.metadata
    if leaf.broken("metadata"):
        return INCOMPLETE, f"metadata unreadable: {leaf.broken('metadata')}"
    if isinstance(meta, dict):
        if str(meta.get("status", "")).lower() in RUNNING:
            return INCOMPLETE, "metadata says the run is still running and records no end"
        if "exit_status" in meta:
            code, failure = meta.get("exit_status"), meta.get("failure")
            if code == 0 and not failure:
                return OK, "exit 0"
            return FAILED, f"exit {code}: {failure or 'failed'}"
        if meta.get("invocation_end_time") or isinstance(meta.get("runtime"), (int, float)):
            return OK, "finished (end time recorded)"
        return INCOMPLETE, "metadata records no end time"
    if isinstance(leaf.summary, dict):
        if files.names(leaf.path).get(LOG_FILE) == files.FILE:
            # mlpstorage's own leaf (its log is written from the start, the metadata in any
            # case at the end): the tool was stopped after its engine finished, before it
            # checked the engine's outputs, so the run counts nowhere.
            return INCOMPLETE, "no metadata: mlpstorage was stopped before it checked the engine's outputs"
        return OK, "no metadata; the engine's summary.json is present"
    return INCOMPLETE, "no metadata (the run never finished writing its leaf)"
