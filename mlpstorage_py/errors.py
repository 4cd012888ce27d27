"""Exceptions that carry their exit code, so main() maps every failure the same way.

Exit codes (documented in ManPage.md, EXIT STATUS):
  0 success; 1 validate found violations / general failure; 2 bad arguments;
  3 file or directory not found; 4 permission denied; 5 configuration error
  (uninitialised or foreign results directory, missing required setting);
  6 the benchmark or a child process failed; 7 timeout; 8 interrupted (SIGINT/SIGTERM);
  9 a run-time gate refused the run (CLOSED/OPEN limits, capacity, filesystem separation);
  10 a client host is unreachable (its name does not resolve or its sshd does not answer);
  11 a launched job's ranks did not all start within its start-up allowance;
  12 I/O tracing (--trace-io) cannot run on every client host (not root, no bpftrace, no
     tracefs, no BTF), so nothing was started;
  13 refused: content read from a results tree (a leaf's replay.fio, a history entry) asked to
     run something this tool does not vouch for, so nothing was started;
  14 stalled: a launched job's ranks made no progress for the stall timeout (--stall-timeout);
  15 an object-storage endpoint of the run's list refused or stopped answering during the run.
"""

from __future__ import annotations

import os


class MlpsError(Exception):
    """Base class: a one-line message for the user and the exit code to return."""

    exit_code = 1


class UsageError(MlpsError):
    exit_code = 2


class NotFoundError(MlpsError):
    exit_code = 3


class PermissionDenied(MlpsError):
    exit_code = 4


class ConfigurationError(MlpsError):
    exit_code = 5


def missing_directory(what: str, path: os.PathLike[str] | str) -> ConfigurationError:
    """The error for a directory that is not there: absent, or something else by that name."""
    found = "is not a directory" if os.path.lexists(path) else "does not exist"
    return ConfigurationError(f"{what} {path} {found}")


class BenchmarkFailed(MlpsError):
    exit_code = 6


class TimeoutExpired(MlpsError):
    exit_code = 7


class StartupExpired(TimeoutExpired):
    """A job's ranks did not all report within the start-up allowance: a hang before the work
    (a remote shell that never answers, a rank stuck in an import), told apart from the work's
    own deadline. A TimeoutExpired, so whoever records a deadline's stop records this one too."""

    exit_code = 11


class Stalled(TimeoutExpired):
    """A job's ranks stopped making progress (launch/watch.py): a hang, told apart from a slow
    run, which is never stopped. A TimeoutExpired, so whoever records a deadline's stop records
    this one too."""

    exit_code = 14


class TraceUnavailable(MlpsError):
    """--trace-io was asked for but a host cannot trace: refused before anything starts."""

    exit_code = 12


class Refused(MlpsError):
    """A results tree is data: a job file or recorded command from one that would run a program,
    reach a path or move bytes this tool did not write it to is refused before anything starts."""

    exit_code = 13


class Interrupted(MlpsError):
    exit_code = 8


class GateRefused(MlpsError):
    exit_code = 9


class HostUnreachable(MlpsError):
    exit_code = 10


class EndpointFailed(MlpsError):
    """An S3 endpoint of the run's list (--s3-endpoints) refused or stopped answering mid-run."""

    exit_code = 15


class NotAvailable(MlpsError):
    """A registered command or storage type whose engine is not in this build yet."""

    exit_code = 1
