"""The one table of utility commands: each entry is where the command sits, its help, its
arguments, its shared flags, its handler and whether it reads a whole package (Command). The
parser is built from it and dispatch runs the entry argparse picked, so nothing else has to
be kept in step. Order is the order `--help` lists them in, after the modes."""

from __future__ import annotations

from typing import Any

from mlpstorage_py.cli import config, history, replay, submission, systems, utility
from mlpstorage_py.cli.command import DEBUG, NONE, TREE, Command, Group

COMMANDS: tuple[Group | Command, ...] = (
    Command(("init",), "initialise a results directory for an organization", utility.init, utility.init_arguments,
            description="Write the results sentinel for <org> and record <dir> as the default results directory, "
                        "unless the default already names another results tree (--set-default).",
            flags=DEBUG),
    Command(("validate",), "check a results tree or submission package against the rules", utility.validate,
            utility.validate_arguments,
            description="Check a package against the rules; exit 0 when nothing fails, 1 otherwise."),
    Group("reports", "aggregate results: `reports reportgen`, `reports html`"),
    Command(("reports", "reportgen"), "write the results tables, public IDs and submission.yaml", utility.reportgen,
            description="Compute each result's figures by the rules into results.json, the organization's "
                        "results.json/results.csv rollups with pinned Public IDs, and submission.yaml."),
    Command(("reports", "html"), "write one self-contained HTML page of the tree: figures, plots, findings",
            utility.reports_html, utility.html_arguments,
            description="Per result: the figures of its results.json (run reportgen first), plots of its runs and "
                        "the validate findings, as one HTML page that loads nothing from anywhere."),
    Group("history", "show or re-run recorded commands"),
    Command(("history", "show"), "list recorded commands", history.history_show, history.history_show_arguments),
    Command(("history", "rerun"), "run a recorded command again once confirmed (a new leaf; nothing is overwritten)",
            history.history_rerun, history.history_rerun_arguments),
    Command(("version",), "print the tool version, rules edition and layout version", utility.version, flags=DEBUG),
    Group("systems", "system descriptions: `systems describe <system>`", debug=True),
    Command(("systems", "describe"), "write systems/<system>.yaml from the client hosts the runs recorded",
            systems.describe, systems.describe_arguments,
            description="Write <division>/<org>/systems/<system>.yaml from the host records of the system's runs "
                        "(clients: count, CPU, cores, memory, OS, kernel, NICs), with FILL IN placeholders for what "
                        "only the submitter knows. Never overwrites without --force."),
    Group("config", "per-user defaults: `config show|set|unset|path`",
          description="Per-user defaults in $XDG_CONFIG_HOME/mlpstorage/config.yaml. A command takes each setting "
                      "from its flag, else its MLPSTORAGE_* variable, else this file.",
          debug=True),
    Command(("config", "show"), "every key, its value and where it comes from (environment, file, unset)",
            config.show, config.show_arguments, flags=NONE),
    Command(("config", "set"), "set KEY to VALUE (hosts and mpi_params take several values)", config.set_key,
            config.set_arguments, flags=NONE),
    Command(("config", "unset"), "remove KEY from the file", config.unset_key, config.unset_arguments, flags=NONE),
    Command(("config", "path"), "print the file's path", config.path, flags=NONE),
    Command(("status",), "per result: runs present/required, findings, paperwork and a verdict", submission.status,
            submission.status_arguments,
            description="One row per result (division, organization, system, benchmark, model): run leaves present "
                        "/ required, the checker's INVALID and WARNING counts, missing system paperwork, and a "
                        "verdict: short, invalid, paperwork or ready.",
            flags=TREE),
    Command(("submit",), "regenerate the rollups, validate, and write the submission tarball", submission.submit,
            submission.submit_arguments,
            description="Regenerate the rollups (reportgen), run the checker and, only when nothing is INVALID, "
                        "write <org>-<edition>-<timestamp>.tar.gz with its .sha256 and a manifest.",
            flags=TREE),
    Group("runs", "list, show and tidy run leaves: list, show, rm, purge, gc"),
    Command(("runs", "list"), "every leaf with its state, size and code image", submission.runs_list,
            submission.runs_list_arguments, flags=TREE),
    Command(("runs", "show"), "one leaf in detail", submission.runs_show, submission.runs_show_arguments),
    Command(("runs", "rm"), "move leaves to the trash (.mlps/trash in the tree); a dry run without --yes",
            submission.runs_rm, submission.runs_rm_arguments,
            description="Select leaves by ID, or by filters that must all hold; selected leaves move to "
                        "<results-dir>/.mlps/trash/<stamp>/, keeping their paths."),
    Command(("runs", "purge"), "delete the trash for good; a dry run without --yes", submission.runs_purge,
            submission.yes_argument),
    Command(("runs", "gc"), "move code images no leaf points to into the trash; a dry run without --yes",
            submission.runs_gc, submission.yes_argument),
    Command(("replay",), "run a traced leaf's distilled fio job (replay.fio) and compare it with the run",
            replay.replay, replay.replay_arguments,
            description="Write replay.fio into LEAF from its io_trace.json when it has none, run it with fio on DIR "
                        "(here, or one fio per --hosts entry), and print the replay's bandwidth and latency "
                        "percentiles beside the traced run's; the figures go to LEAF/replay_<timestamp>.json.",
            flags=DEBUG),
)


def register(top: Any) -> None:
    """Every group and command of the table under the top-level subparsers, in table order."""
    groups: dict[str, Any] = {}
    for entry in COMMANDS:
        if isinstance(entry, Group):
            groups[entry.name] = entry.add_to(top)
        else:
            entry.add_to(groups[entry.path[0]] if len(entry.path) > 1 else top)
