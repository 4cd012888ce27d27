"""What the command line says about launching a benchmark's jobs: the client hosts, the MPI
launcher and its flags, and the limits every job runs under. The CLI builds it (cli/requests.py)
from the flags of cli/common.add_mpi; launch/ reads it, never the parsed arguments."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchOptions:
    """The MPI group's flags, each as given (None or empty: not given, the table's default applies)."""

    hosts: tuple[str, ...] = ()            # --hosts (HOST[:SLOTS]); empty: not given, 127.0.0.1
    mpi_bin: str | None = None             # --mpi-bin; None: srun inside a Slurm allocation, else mpirun
    oversubscribe: bool = False            # --oversubscribe
    allow_run_as_root: bool = False        # --allow-run-as-root (also implied when running as root)
    mpi_params: tuple[str, ...] = ()       # --mpi-params, each split like a shell would
    deadline: float | None = None          # --deadline: seconds of work; None: derived from the work
    stall_timeout: float | None = None     # --stall-timeout; None: derived from one unit of work
    telemetry_interval: float | None = None  # --telemetry-interval; None: configs/tool.yaml's, 0: none
    startup_allowance: float | None = None   # --startup-allowance; None: derived from hosts and ranks
