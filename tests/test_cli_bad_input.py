"""Bad command-line input, swept over the whole argparse tree (build_parser), so a new command
or flag is covered the day it is added: every value a flag's type or choices must refuse is
refused with exit 2 and one line naming the flag, before anything is written (no leaf, no
history entry), never with a traceback. Flags that take free text (paths, names, keys) have
explicit cases below; a new free-text flag fails `test_every_free_text_flag_has_cases` until
it gets some. MLPS_BAD_INPUT_FULL=1 (bench/faults.py) sweeps every mode's copy of every flag;
CI sweeps each flag once."""

from __future__ import annotations

import argparse
import os
import time
from typing import Iterator

import pytest

from conftest import all_leaves
from fault_figures import record
from mlpstorage_py.cli import build_parser

# Values each argparse type must refuse (by the type function's name); a type missing here
# fails the sweep, so a new kind of flag is never silently skipped.
BAD_VALUES: dict[str, tuple[str, ...]] = {
    "positive_int": ("-1", "0", "abc", "1.5", ""),
    "positive_float": ("-1", "0", "abc", "inf", "nan"),
    "non_negative_int": ("-1", "abc"),
    "non_negative_float": ("-1", "abc", "1e999"),
    "int": ("abc", "1.5"),
    "host_list": ("a/b", "../x", "h;rm -rf /", "$(id)", "h`id`"),
    "_host": ("a/b", "h:1", "$(id)", ".."),
    "_port": ("0", "70000", "-1", "abc"),
    "mpi_bin_arg": ("/nonexistent/mpirun", "rm;x"),
    "choices": ("no-such-choice", "../x", "$(id)"),
}
FULL = os.environ.get("MLPS_BAD_INPUT_FULL") == "1"


def leaf_parsers(parser: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ()
                 ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command words, parser) of every command that takes no further subcommand."""
    parser = parser or build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from leaf_parsers(sub, path + (name,))


def value_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.nargs != 0 and not isinstance(a, (argparse._HelpAction,
                                                                            argparse._SubParsersAction))]


def type_key(action: argparse.Action) -> str | None:
    if action.choices:
        return "choices"
    return getattr(action.type, "__name__", None) if action.type else None


def parse_cases(full: bool = FULL) -> list[tuple[tuple[str, ...], str, str, tuple[str, ...]]]:
    """(command words, flag, bad value, names the error may use) for every typed flag; without
    `full`, a flag that every mode (closed/open/whatif) and model of a command repeats is swept
    in one of them."""
    cases, seen = [], set()
    for path, parser in leaf_parsers():
        for action in value_actions(parser):
            key = type_key(action)
            if key is None:
                continue
            flag = action.option_strings[0] if action.option_strings else action.dest
            general = (path[1], path[-1], flag) if path[0] in ("closed", "open", "whatif") else (path, flag)
            if not full and general in seen:
                continue
            seen.add(general)
            assert key in BAD_VALUES, f"no bad values known for {flag} of {' '.join(path)} (type {key})"
            names = tuple(action.option_strings) or (action.dest, str(action.metavar))
            cases.extend((path, flag, value, names) for value in BAD_VALUES[key])
    return cases


def free_text_flags() -> set[str]:
    """Flags (or positionals) whose value no argparse type checks: their cases are explicit."""
    return {(a.option_strings[0] if a.option_strings else a.dest)
            for _, parser in leaf_parsers() for a in value_actions(parser) if type_key(a) is None}


@pytest.fixture
def tree(results, monkeypatch):
    monkeypatch.setenv("MLPSTORAGE_RESULTS_DIR", str(results))
    monkeypatch.setenv("MLPSTORAGE_SYSTEMNAME", "sys1")
    return results


def assert_clean_refusal(res, code: int, names: tuple[str, ...], what: str) -> None:
    assert res.rc == code, f"{what}: exit {res.rc}, wanted {code}: {res.err}"
    assert "Traceback" not in res.err and "internal error" not in res.err, what
    errors = [line for line in res.err_lines if line.startswith("mlpstorage: error: ")]
    assert len(errors) == 1 and res.err_lines[-1] == errors[0], f"{what}: not one error line last: {res.err_lines}"
    assert any(name in errors[0] for name in names), f"{what}: the error does not name the flag: {res.err}"


def test_every_typed_flag_refuses_its_bad_values(cli, tree):
    cases = parse_cases()
    started, clean = time.monotonic(), 0
    for path, flag, value, names in cases:
        argv = [*path, value] if not flag.startswith("-") else [*path, f"{flag}={value}"]
        res = cli(*argv)
        assert_clean_refusal(res, 2, names, " ".join(argv))
        clean += 1
    assert all_leaves(tree) == [] and not (tree / ".mlps" / "history").exists()
    record("bad-input", len(cases), clean, sweep="typed flags", commands=len(list(leaf_parsers())),
           seconds=round(time.monotonic() - started, 1))
    assert len(cases) > 200  # the tree really was walked


# Free-text flags: (argv with placeholders, exit code, text the one line must hold). @F is a
# regular file, @N a path that does not exist, @D a directory on another filesystem than the
# results, @T the test's directory.
SEMANTIC: dict[str, list[tuple[str, int, str]]] = {
    "--systemname": [("open training unet3d datagen -np 1 -dd @D -sn a/b", 2, "system name 'a/b'"),
                     ("open training unet3d datagen -np 1 -dd @D -sn ..", 2, "system name '..'"),
                     ("open kvcache run -np 1 --cache-dir @D/kv -sn x;rm", 2, "system name 'x;rm'")],
    "--results-dir": [("open training unet3d datagen -np 1 -dd @D -rd @N", 5, "results directory @N does not exist"),
                      ("open training unet3d datagen -np 1 -dd @D -rd @F", 5, "results directory @F"),
                      ("reports reportgen -rd @N", 5, "results directory @N"),
                      ("history show -rd @F", 5, "results directory @F")],
    "--data-dir": [("open training unet3d datagen -np 1 -dd @N", 5, "data directory @N does not exist"),
                   ("open training unet3d datagen -np 1 -dd @F", 5, "data directory @F is not a directory")],
    "--storage-root": [("open vectordb HNSW datagen --storage-root @N", 5, "data directory @N does not exist"),
                       ("open vectordb HNSW datagen --storage-root @F", 5, "data directory @F is not a directory")],
    "--checkpoint-folder": [("open checkpointing llama3-8b run -np 2 -at b200 -cm 8 -cf @N", 5, "checkpoint folder @N"),
                            ("open checkpointing llama3-8b run -np 2 -at b200 -cm 8 -cf @F", 5, "checkpoint folder @F")],
    "--cache-dir": [("open kvcache run -np 1 --cache-dir @F", 4, "--cache-dir @F")],
    "--config": [("open kvcache run -np 1 --cache-dir @D/kv --config @N", 3, "--config @N not found"),
                 ("open kvcache run -np 1 --cache-dir @D/kv --config @F", 2, "config @F: expected a mapping of sections at the top, found a str"),
                 ("open kvcache run -np 1 --cache-dir @D/kv --config @T", 3, "--config @T")],
    "--collection": [("open vectordb HNSW datagen --storage-root @D --collection a/b", 2, "collection name 'a/b'"),
                     ("open vectordb HNSW datagen --storage-root @D --collection ..", 2, "collection name '..'"),
                     ("open vectordb HNSW datagen --storage-root @D --collection $(id)", 2, "collection name '$(id)'")],
    "--index-type": [("open vectordb HNSW datagen --storage-root @D --index-type ../x", 2, "--index-type ../x")],
    "--params": [("open training unet3d datagen -np 1 -dd @D --params noequals", 2, "--params expects KEY=VALUE"),
                 ("open training unet3d datagen -np 1 -dd @D --params no.such.key=1", 9, "parameter no.such.key"),
                 ("closed checkpointing llama3-8b run -np 8 -at b200 -cm 8 -cf @D --params model.x=1", 9, "model.x")],
    "--mpi-params": [("open training unet3d datagen -np 1 -dd @D --mpi-params 'unterminated", 2, "--mpi-params")],
    "--json": [("validate @T --json @T", 2, "--json @T"), ("validate @T --json @N/x.json", 3, "--json @N/x.json")],
    "--reference-checksum": [("validate @T --reference-checksum xyz", 2, "--reference-checksum"),
                             ("validate @T --reference-checksum ../../etc", 2, "--reference-checksum")],
    "--submitters": [("validate @T --submitters a/b", 2, "--submitters"), ("validate @T --submitters ..", 2, "--submitters")],
    "package": [("validate @N", 3, "package directory @N does not exist"), ("validate @F", 3, "package directory @F")],
    "org": [("init a/b @T/r2", 2, "organization name 'a/b'"), ("init .. @T/r2", 2, "organization name '..'"),
            ("init x;id @T/r2", 2, "organization name 'x;id'")],
    "dir": [("init Org @F", 5, "results directory @F is not a directory")],
    "--dlio-bin-path": [("open training unet3d datagen -np 1 -dd @D --dlio-bin-path @N", 2, "--dlio-bin-path @N"),
                        ("open training unet3d datagen -np 1 -dd @D --dlio-bin-path @F", 2, "--dlio-bin-path @F")],
    "--output": [("reports html --output @T", 2, "@T already exists"),
                 ("reports html --output @N/x/y.html", 3, "directory @N/x does not exist")],
    "system": [("systems describe a/b", 2, "system name 'a/b'"), ("systems describe ..", 2, "system name '..'")],
    "key": [("config set nosuchkey 1", 2, "unknown config key 'nosuchkey'"),
            ("config unset ../x", 2, "unknown config key '../x'")],
    "values": [("config set systemname a/b", 2, "system name 'a/b'"), ("config set hosts h;rm", 2, "'h;rm'")],
    "--org": [("submit --org a/b", 2, "organization 'a/b'"), ("submit --org ..", 2, "organization '..'")],
    "id": [("runs show ../../etc", 2, "leaf '../../etc' is no leaf"), ("runs show 29990101_000000", 2, "no leaf")],
    "ids": [("runs rm ../x", 2, "leaf '../x' is no leaf"), ("runs rm $(id)", 2, "leaf '$(id)'")],
    "leaf": [("replay @N --directory @T", 3, "@N is not a directory"), ("replay @F --directory @T", 3, "@F is not a directory"),
             ("replay @T --directory @T", 2, "@T is not a run leaf")],
    "--directory": [("replay @T --directory @N", 5, "--directory @N does not exist"),
                    ("replay @T --directory @F", 5, "--directory @F")],
    "--older-than": [("runs rm --older-than abc", 2, "--older-than 'abc'"), ("runs rm --older-than 5y", 2, "--older-than '5y'")],
    "--s3-endpoints": [("open training unet3d datagen -np 1 -dd @D --s3-endpoints http://a:1", 2, "apply to `object` runs")],
    "--s3-endpoints-file": [("open training unet3d datagen -np 1 -dd @D --s3-endpoints-file @N", 2,
                             "apply to `object` runs")],
    "--index-copy-dir": [("open vectordb DISKANN run --vdb-engine diskann --storage-root @T --index-copy-dir @F", 2,
                          "--index-copy-dir @F is not a directory"),
                         ("open vectordb DISKANN run --vdb-engine diskann --storage-root @T --index-copy-dir @T/diskann", 2,
                          "holds the index itself")],
}
# Free-text flags with no bad value of their own (any text is a valid value): none so far.
EXEMPT: set[str] = set()


def test_every_free_text_flag_has_cases():
    missing = free_text_flags() - set(SEMANTIC) - EXEMPT
    assert not missing, f"free-text flags without bad-input cases: {sorted(missing)}"


def test_free_text_flags_refuse_bad_values(cli, tree, tmp_path, other_fs_dir):
    afile = tmp_path / "afile"
    afile.write_text("not a directory\n", encoding="utf-8")
    places = {"@F": str(afile), "@N": str(tmp_path / "nope"), "@D": str(other_fs_dir), "@T": str(tmp_path)}
    tried = clean = 0
    for flag, cases in SEMANTIC.items():
        for template, code, text in cases:
            argv = template.split(" ")
            for mark, value in places.items():
                argv = [a.replace(mark, value) for a in argv]
                text = text.replace(mark, value)
            tried += 1
            res = cli(*argv)
            assert_clean_refusal(res, code, (text,), " ".join(argv))
            clean += 1
    assert all_leaves(tree) == [], "a refused command left a leaf"
    assert not (tmp_path / "r2").exists(), "init with a bad name created its directory"
    assert afile.read_text(encoding="utf-8") == "not a directory\n"
    record("bad-input", tried, clean, sweep="free-text flags")


def test_a_json_target_that_cannot_take_the_file_is_refused_before_the_package_is_read(cli, tree, tmp_path):
    """validate --json DIR (or a path whose directory is missing) fails at once, with no findings
    printed first: a large package is not read only to be refused at the end."""
    for target, code in ((tmp_path, 2), (tmp_path / "nope" / "x.json", 3)):
        res = cli("validate", str(tree), "--json", str(target))
        assert_clean_refusal(res, code, (f"--json {target}",), f"validate --json {target}")
        assert res.out == "", res.out
