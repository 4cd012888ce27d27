"""`mlpstorage init`: the results-root sentinel and the recorded default results directory."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from mlpstorage_py import LAYOUT_VERSION, __version__
from mlpstorage_py.errors import ConfigurationError, UsageError
from mlpstorage_py.results.io import atomic_write_text, utc_now

SENTINEL = "mlperf-results.yaml"
# A directory name in the tree: starts with a letter or digit, so never "." or ".." (an escape).
ORG_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def user_config_path() -> Path:
    """$XDG_CONFIG_HOME/mlpstorage/config.yaml (a relative XDG_CONFIG_HOME is ignored)."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".config"
    return root / "mlpstorage" / "config.yaml"


def read_user_config() -> dict[str, Any]:
    """The user config as a mapping ({} without one); a file that is not one is refused in one line."""
    path = user_config_path()
    if not path.is_file():
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:  # RecursionError: nested too deep
        raise UsageError(f"{path}: cannot be read as YAML ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a mapping of keys to values")
    return data


def record_default(results_dir: Path, set_default: bool = False) -> str:
    """Record results_dir as the per-user default, unless the default already names another
    live results tree: every later command without --results-dir would silently land in the
    new tree. Returns the sentence that says which was done."""
    config = read_user_config()
    recorded = config.get("results_dir")
    other = Path(str(recorded)).expanduser().resolve() if recorded else None
    if other == results_dir:
        return "already the default results directory"
    live = other is not None and (other / SENTINEL).is_file()
    if live and not set_default:
        return (f"the default results directory stays {other} (another results tree); to switch: "
                f"`mlpstorage config set results_dir {results_dir}` or `mlpstorage init ... --set-default`")
    config["results_dir"] = str(results_dir)
    path = user_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(config, sort_keys=True))
    if live:
        return f"now the default results directory, replacing {other} (--set-default)"
    if other is not None:
        return f"recorded as the default results directory, replacing {other} (no results tree there)"
    return "recorded as the default results directory"


def read_sentinel(results_dir: Path) -> dict[str, Any] | None:
    """The sentinel's mapping (None without one). A tree travels between people: its orgname is
    checked here, where every reader gets it, since it becomes a directory name of the leaves."""
    path = results_dir / SENTINEL
    if not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:  # RecursionError: nested too deep
        raise ConfigurationError(f"{path} is not a valid results sentinel ({type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())[:200]})") from None
    if not isinstance(data, dict) or "orgname" not in data:
        raise ConfigurationError(f"{path} is not a valid results sentinel (no orgname)")
    org = data["orgname"]
    if not isinstance(org, str) or not ORG_PATTERN.fullmatch(org):  # it names a directory of every leaf path
        raise ConfigurationError(f"{path}: orgname {str(org)[:100]!r} is not an organization name (a letter or "
                                 f"digit, then [A-Za-z0-9._-]); a tree's sentinel never places a leaf elsewhere")
    return data


def init_results_dir(orgname: str, results_dir: Path, set_default: bool = False) -> tuple[Path, bool]:
    """`mlpstorage init` as a library call: the tree, then the per-user default by record_default's rule."""
    path, created = create_results_dir(orgname, results_dir)
    record_default(path, set_default)
    return path, created


def create_results_dir(orgname: str, results_dir: Path) -> tuple[Path, bool]:
    """Create or confirm a results root for an organization; returns (path, created)."""
    if not ORG_PATTERN.match(orgname):
        raise UsageError(f"organization name {orgname!r} must start with a letter or digit and match [A-Za-z0-9._-]+")
    results_dir = results_dir.expanduser().resolve()
    if results_dir.exists() and not results_dir.is_dir():
        raise ConfigurationError(f"results directory {results_dir} is not a directory")
    existing = read_sentinel(results_dir) if results_dir.is_dir() else None
    if existing is not None:
        if existing["orgname"] != orgname:
            raise ConfigurationError(
                f"{results_dir} is already initialised for organization "
                f"{existing['orgname']!r}; refusing to re-initialise it for {orgname!r}")
        return results_dir, False
    if results_dir.is_dir() and any(results_dir.iterdir()):
        raise ConfigurationError(
            f"{results_dir} is not empty and has no {SENTINEL}; choose an empty or new directory")
    results_dir.mkdir(parents=True, exist_ok=True)
    sentinel = {
        "mlperf_results_version": LAYOUT_VERSION,
        "orgname": orgname,
        "initialized_at": utc_now(),
        "initialized_by": f"mlpstorage {__version__}",
    }
    atomic_write_text(results_dir / SENTINEL, yaml.safe_dump(sentinel, sort_keys=False))
    return results_dir, True


def resolve_results_dir(flag: str | None) -> tuple[Path, str]:
    """--results-dir, then MLPSTORAGE_RESULTS_DIR, then the default recorded by init."""
    if flag:
        return Path(flag).expanduser().resolve(), "--results-dir"
    env = os.environ.get("MLPSTORAGE_RESULTS_DIR")
    if env:
        return Path(env).expanduser().resolve(), "MLPSTORAGE_RESULTS_DIR"
    recorded = read_user_config().get("results_dir")
    if recorded:
        return Path(recorded), str(user_config_path())
    raise ConfigurationError(
        "no results directory: pass --results-dir, set MLPSTORAGE_RESULTS_DIR, "
        "or run `mlpstorage init <org> <dir>` once to record a default")


def require_org(results_dir: Path) -> str:
    """The organization recorded by init; a leaf cannot be placed without it."""
    if not results_dir.is_dir():
        raise ConfigurationError(f"results directory {results_dir} does not exist; run `mlpstorage init <org> {results_dir}`")
    sentinel = read_sentinel(results_dir)
    if sentinel is None:
        raise ConfigurationError(
            f"results directory {results_dir} has not been initialised; run `mlpstorage init <org> {results_dir}` first")
    return str(sentinel["orgname"])


def tree_orgs(results_dir: Path) -> list[str]:
    """Organizations a tree holds as <division>/<org>/ (closed, open), sorted, never following a link:
    a published package has no sentinel, and may hold several submitters."""
    found: set[str] = set()
    for division in ("closed", "open"):
        base = results_dir / division
        if base.is_dir() and not base.is_symlink():
            found.update(p.name for p in base.iterdir() if p.is_dir() and not p.is_symlink() and ORG_PATTERN.match(p.name))
    return sorted(found)


def resolve_orgs(results_dir: Path) -> list[str]:
    """The tree's organizations: the sentinel's where init wrote one, else those of the tree itself
    (`<division>/<org>/...`), so reports and checks run on published packages as they are."""
    if not results_dir.is_dir():
        raise ConfigurationError(f"results directory {results_dir} does not exist")
    sentinel = read_sentinel(results_dir)
    if sentinel is not None:
        return [str(sentinel["orgname"])]
    orgs = tree_orgs(results_dir)
    if not orgs:
        raise ConfigurationError(f"{results_dir} has no {SENTINEL} and no closed/<org>/ or open/<org>/ directory: "
                                 f"not a results tree or package (run `mlpstorage init <org> {results_dir}` to start one)")
    return orgs
