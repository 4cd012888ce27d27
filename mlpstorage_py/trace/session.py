"""Trace what reached the storage on every client host during a run (`--trace-io`, OPEN only,
Rules 6.5.2/6.6.2): one bpftrace per host, started before the work and stopped after it on
every path, and the io_trace.json record (results/io_trace.py) built from what they printed.

This machine's host is traced by a bpftrace child of ours; a remote host by the trace agent
(trace/agent.py) started over the remote shell MPI uses, which stops its bpftrace when its stdin
closes (a remote shell passes no signal on). Each host is asked first what it can trace and
where the data paths land there (trace/devices.py); nothing starts unless every host can.

Simulated hosts (namespaces on one kernel and one disk) each see every host's I/O: a host's
share is what its own hostname issued; what no traced host's name issued (the kernel's writeback
and journal threads, other containers) is `unattributed`, taken from one tracer per kernel.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from mlpstorage_py.errors import TimeoutExpired, TraceUnavailable
from mlpstorage_py.launch import heartbeat
from mlpstorage_py.launch.hostnames import host_name, is_local
from mlpstorage_py.launch.preflight import remote_shell as mpi_remote_shell
from mlpstorage_py.results.io_trace import SCHEMA
from mlpstorage_py.results.logs import log
from mlpstorage_py.trace import agent
from mlpstorage_py.trace.bpf import Target, program
from mlpstorage_py.trace.devices import facts, problems
from mlpstorage_py.trace.parse import Collector

ATTACH_DEADLINE_S = 60.0
DRAIN_S = 5.0  # how long the end waits for what the tracers counted to complete (a cap, met only by a hung request)
DRAIN_STALL_S = 1.0  # ... or for a completion, once none came for this long (the rest will not be seen)
PROBE_DEADLINE_S = 30.0
CONNECT_TIMEOUT_S = 10
AGENT = [sys.executable, "-m", "mlpstorage_py.trace.agent"]
WRITEBACK_WHY = ("I/O issued under no traced host's hostname: the kernel does not attribute writeback to "
                 "the process that dirtied the page, so buffered writes reach the disk from its own threads "
                 "(kworker writeback, jbd2 journal commits, flushes), which run under the root namespace's "
                 "name; on simulated hosts (one kernel, one disk) that name is no client host's. Other "
                 "containers' I/O on the same disk lands here too")


def _remote(shell: list[str], host: str, argv: list[str]) -> list[str]:
    """argv run on `host` through the remote shell: ssh joins its arguments into one command
    line for the remote shell, so each is quoted (a no-op for a plain word)."""
    options = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}"] \
        if "ssh" in os.path.basename(shell[0]) else []
    return [*shell, *options, host_name(host), *(shlex.quote(a) for a in argv)]


def _survey(hosts: list[str], data_paths: list[str], shell: list[str]) -> dict[str, dict[str, Any] | str]:
    """Each host's facts (trace/devices.py), or why it did not answer; remote hosts at once."""
    found: dict[str, dict[str, Any] | str] = {}
    asked: dict[str, subprocess.Popen] = {}
    for host in hosts:
        if is_local(host):
            found[host] = facts(data_paths)
        else:
            asked[host] = subprocess.Popen(_remote(shell, host, [*AGENT, "probe", *data_paths]),
                                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    started = time.monotonic()
    for host, child in asked.items():
        try:
            out, err = child.communicate(timeout=max(0.1, PROBE_DEADLINE_S - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            found[host] = f"no answer within {PROBE_DEADLINE_S:.0f} s"
            continue
        lines = [l for l in out.splitlines() if l.startswith("{")]
        try:
            found[host] = json.loads(lines[-1])
        except (IndexError, ValueError):
            said = [l.strip() for l in err.splitlines() if l.strip()]
            found[host] = f"cannot run the trace agent ({said[-1][:200] if said else f'exit {child.returncode}'})"
    return {host: found[host] for host in hosts}


def _refuse(survey: dict[str, dict[str, Any] | str]) -> None:
    bad = {host: [answer] if isinstance(answer, str) else problems(answer) for host, answer in survey.items()}
    bad = {host: why for host, why in bad.items() if why}
    if bad:
        raise TraceUnavailable(f"--trace-io: {len(bad)} of {len(survey)} host(s) cannot trace: "
                               + "; ".join(f"{host}: {', '.join(why)}" for host, why in bad.items()))


def check(hosts: list[str], data_paths: list[str], remote_shell: list[str] | None) -> None:
    """Raise errors.TraceUnavailable (exit 12, one line naming each host and why) unless every host can
    trace: root, bpftrace on PATH, tracefs mounted, BTF. Nothing is started when any host fails."""
    _refuse(_survey(hosts, data_paths, remote_shell or mpi_remote_shell()))


def _targets(answer: dict[str, Any]) -> list[Target]:
    """The distinct devices behind a host's data paths (two paths on one disk trace it once)."""
    seen: dict[int, Target] = {}
    for path in answer["paths"]:
        for device in path["devices"]:
            seen.setdefault(device["dev"], Target(device["name"], device["dev"], device["level"]))
    return list(seen.values())


class _Tracer:
    """One host's bpftrace (or its agent), the threads reading its output, and what it said."""

    def __init__(self, host: str, answer: dict[str, Any], targets: list[Target], traced: set[str]) -> None:
        self.host, self.answer, self.targets = host, answer, targets
        self.local = is_local(host)
        self.collector = Collector(answer["hostname"], traced)
        self.errors: collections.deque[str] = collections.deque(maxlen=40)
        self.child: subprocess.Popen | None = None
        self.readers: list[threading.Thread] = []
        self.program: Path | None = None
        self.drain = heartbeat.new_mark()  # its getpgid() makes this tracer drain (trace/bpf.py)
        self.skipped: int | None = None  # its probes' runs the kernel skipped (agent.skipped_runs)

    def start(self, workdir: Path, index: int, shell: list[str], mark: int | None) -> None:
        self.program = workdir / f"io-trace-{uuid.uuid4().hex[:12]}-{index}.bt"
        filesystems = [int(p["fs_dev"]) for p in self.answer["paths"] if p.get("fs_dev") is not None]
        self.program.write_text(program(self.targets, mark, filesystems, self.drain), encoding="utf-8")
        if self.local:
            argv = agent.bpftrace_argv(self.answer["bpftrace"], self.program)
            stdin: int = subprocess.DEVNULL
        else:
            argv, stdin = _remote(shell, self.host, [*AGENT, "run", str(self.program), str(self.drain)]), subprocess.PIPE
        log.info(f"trace-io: {self.host}: {shlex.join(argv)}")
        self.child = agent.start(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=agent.bpftrace_env())
        self.readers = [threading.Thread(target=self._read, args=(self.child.stdout, self.collector.feed), daemon=True),
                        threading.Thread(target=self._read, args=(self.child.stderr, self._error), daemon=True)]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream: IO[bytes], sink: Any) -> None:
        for raw in iter(stream.readline, b""):
            sink(raw.decode("utf-8", "replace").rstrip("\n"))

    def _error(self, line: str) -> None:
        """bpftrace's stderr, less the lines it prints on every start here: the locked-memory
        limit it may not raise (it works without), and the source excerpts of its warnings."""
        if line.strip() and "RLIMIT_MEMLOCK" not in line and "WARNING" not in line and not line.startswith(" "):
            self.errors.append(line.strip())

    def finished(self) -> bool:
        return self.child is None or (self.child.poll() is not None and not self.readers[0].is_alive())

    def why(self) -> str:
        said = [line for line in self.errors if "ERROR" in line] or list(self.errors)
        return said[-1][:300] if said else f"exit {self.child.returncode if self.child else '?'}"

    def ask_drain(self) -> None:
        """Stop counting anything new: the drain's getpgid() here, or a line to a remote agent."""
        if self.child is None or self.child.poll() is not None:
            return
        if self.local:
            agent.drain(self.drain)
            return
        assert self.child.stdin is not None, "a remote agent is started with its stdin a pipe"
        try:
            self.child.stdin.write(agent.DRAIN_LINE)
            self.child.stdin.flush()
        except (OSError, ValueError):
            pass

    def drained(self) -> bool:
        """Nothing it counted is in flight any more, or no completion came for DRAIN_STALL_S (or
        it never counted, or it is gone)."""
        since = self.collector.progress_at
        stalled = since is not None and time.monotonic() - since >= DRAIN_STALL_S
        return self.collector.drained or stalled or not self.collector.ready or self.finished()

    def ask_stop(self) -> None:
        """SIGINT to our bpftrace; for a remote host, close the agent's stdin."""
        if self.child is None or self.child.poll() is not None:
            return
        if self.local:
            self.skipped = agent.skipped_runs(self.child.pid)
            self.child.send_signal(signal.SIGINT)
        else:
            assert self.child.stdin is not None, "a remote agent is started with its stdin a pipe"
            try:
                self.child.stdin.close()
            except OSError:
                pass

    def wait_stopped(self, grace_s: float) -> None:
        """Wait for the tracer to end (SIGKILL after grace_s), its output read to the end."""
        if self.child is None:
            return
        try:
            self.child.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
        for reader in self.readers:
            reader.join(timeout=grace_s)

    def kill(self) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait()

    def reap(self, shell: list[str]) -> None:
        """A remote host whose agent did not say it ended: kill its bpftrace by our program's path."""
        if self.local or self.child is None or self.collector.agent_exit is not None or self.program is None:
            return
        try:
            done = subprocess.run(_remote(shell, self.host, [*AGENT, "reap", str(self.program)]),
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=PROBE_DEADLINE_S)
            log.warning(f"trace-io: {self.host}: the agent did not end cleanly; reaped: {done.stdout.strip()}")
        except subprocess.TimeoutExpired:
            log.warning(f"trace-io: {self.host}: could not reach the host to reap its bpftrace")


class TraceSession:
    """One bpftrace per host for the length of a `with` block; record() is the io_trace.json."""

    def __init__(self, hosts: list[str], data_paths: list[str], remote_shell: list[str] | None,
                 workdir: Path, mark: int | None = None) -> None:
        self.hosts, self.data_paths, self.workdir = list(hosts), list(data_paths), Path(workdir)
        self.mark = mark  # the run's work mark (launch/heartbeat.new_mark), None: nothing marks
        self.shell = remote_shell or mpi_remote_shell()
        self.tracers: list[_Tracer] = []
        self.answers: dict[str, dict[str, Any]] = {}
        self._started = self._stopped = 0.0
        self._record: dict[str, Any] | None = None

    def __enter__(self) -> TraceSession:
        """Start one bpftrace per host and wait (ATTACH_DEADLINE_S, else TimeoutExpired) until
        each has attached every probe; on any failure, stop those started and raise."""
        survey = _survey(self.hosts, self.data_paths, self.shell)
        _refuse(survey)
        self.answers = {host: answer for host, answer in survey.items() if isinstance(answer, dict)}
        traced = {answer["hostname"] for answer in self.answers.values()}
        self.tracers = [_Tracer(host, answer, _targets(answer), traced) for host, answer in self.answers.items()]
        try:
            for index, tracer in enumerate(self.tracers):
                if tracer.targets:
                    tracer.start(self.workdir, index, self.shell, self.mark)
            self._wait_ready()
        except BaseException:
            self._teardown()
            raise
        self._started = time.monotonic()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + ATTACH_DEADLINE_S
        waiting = [t for t in self.tracers if t.child is not None]
        while waiting:
            for tracer in list(waiting):
                if tracer.collector.ready:
                    waiting.remove(tracer)
                elif tracer.finished():
                    raise TraceUnavailable(f"--trace-io: {tracer.host}: bpftrace did not start: {tracer.why()}")
            if waiting and time.monotonic() > deadline:
                raise TimeoutExpired(f"--trace-io: bpftrace did not attach its probes within {ATTACH_DEADLINE_S:.0f} s "
                                     f"on {', '.join(t.host for t in waiting)}")
            time.sleep(0.05)
        log.info(f"trace-io: tracing {len([t for t in self.tracers if t.child])} host(s)")

    def __exit__(self, *exc: object) -> None:
        """Stop every tracer on every path (normal end, exception, KeyboardInterrupt); then the record."""
        self._stopped = time.monotonic()
        self._teardown()
        self._record = self._build()

    def _teardown(self) -> None:
        """Each tracer drains first (counts nothing new; DRAIN_S at most until what it counted
        completed, so its latency histograms hold it), then SIGINT (or stdin closed) to all at
        once, then wait for each; a second interrupt kills what is left. A remote agent that did
        not say it ended is reaped on its host."""
        try:
            for tracer in self.tracers:
                tracer.ask_drain()
            until = time.monotonic() + DRAIN_S
            while not all(tracer.drained() for tracer in self.tracers) and time.monotonic() < until:
                time.sleep(0.02)
            for tracer in self.tracers:
                tracer.ask_stop()
            for tracer in self.tracers:
                tracer.wait_stopped(agent.STOP_GRACE_S + 5)
        except BaseException:
            for tracer in self.tracers:
                tracer.kill()
            for tracer in self.tracers:
                tracer.reap(self.shell)
            raise
        for tracer in self.tracers:
            tracer.reap(self.shell)
            if tracer.program is not None:
                tracer.program.unlink(missing_ok=True)

    def record(self) -> dict[str, Any]:
        """The io_trace.json content (after __exit__)."""
        if self._record is None:
            raise RuntimeError("TraceSession.record() is read after the with block")
        return self._record

    def _build(self) -> dict[str, Any]:
        """The record; its duration is the longest tracer's span on its own clock (the clock of
        its streams' first_s/last_s), so every window lies within it; without a tracer, ours."""
        spans = [t.collector.span_s() for t in self.tracers if t.child is not None and t.collector.ready]
        duration = max(spans) if spans else max(self._stopped - self._started, 0.0) if self._started else 0.0
        hosts: dict[str, Any] = {}
        for tracer in self.tracers:
            complete = tracer.child is not None and tracer.collector.ended
            hosts[tracer.host] = {"hostname": tracer.answer["hostname"], **tracer.collector.part(True, tracer.targets),
                                  "paths": tracer.answer["paths"], "complete": complete or not tracer.targets,
                                  "skipped_probe_runs": tracer.skipped if tracer.local else tracer.collector.skipped}
            if not hosts[tracer.host]["complete"]:
                hosts[tracer.host]["error"] = f"the tracer did not print its maps: {tracer.why()}"
        return {"schema": SCHEMA, **self._level(), "duration_s": round(duration, 3), "data_paths": self.data_paths,
                "complete": all(h["complete"] for h in hosts.values()), "hosts": hosts,
                "unattributed": self._unattributed()}

    def _level(self) -> dict[str, str]:
        """Where the run was traced: block when every data path has a disk behind it; why not, else."""
        paths = [path for answer in self.answers.values() for path in answer["paths"]]
        levels = {path["level"] for path in paths}
        whys = list(dict.fromkeys(path["why"] for path in paths if path["why"]))
        if not paths:
            return {"level": "none", "why": "no data path was given"}
        level = "block" if levels == {"block"} else "object" if levels == {"object"} else \
            "vfs" if "vfs" in levels else "block"
        return {"level": level, "why": "; ".join(whys)}

    def _unattributed(self) -> dict[str, Any]:
        """What no traced host's name issued, from one tracer per kernel (hosts on one kernel all
        see the same); device names carry the host where more than one kernel was traced."""
        first: dict[str, _Tracer] = {}
        for tracer in self.tracers:
            if tracer.child is not None:
                first.setdefault(tracer.answer["boot_id"], tracer)
        devices: dict[str, Any] = {}
        streams: list[dict[str, Any]] = []
        names: set[str] = set()
        for tracer in first.values():
            part = tracer.collector.part(False, tracer.targets, prefix=f"{tracer.host}:" if len(first) > 1 else "")
            devices.update(part["devices"])
            streams += part["streams"]
            names |= {n for n in tracer.collector.names.values() if n not in tracer.collector.traced}
        return {"devices": devices, "streams": streams, "hostnames": sorted(names), "why": WRITEBACK_WHY}


@contextlib.contextmanager
def tracing(hosts: list[str], data_paths: list[str], remote_shell: list[str] | None, workdir: Path,
            keep: Callable[[dict[str, Any]], None]) -> Iterator[None]:
    """A TraceSession around the block; once its tracers started, `keep` gets the record on
    every path (a block that raises still leaves its trace). The run's work mark is the one in
    the environment (benchmarks/tracing.prepared put it there before any command line was built),
    else one drawn now, which every process started inside the block finds (heartbeat.mark_work)."""
    before = os.environ.get(heartbeat.WORK_MARK_ENV)
    mark = int(before) if before and before.isdigit() else heartbeat.new_mark()
    tracer = TraceSession(hosts, data_paths, remote_shell, workdir, mark)
    entered, stopped = False, None
    try:
        with tracer, heartbeat.marked(mark):
            entered = True
            try:
                yield
            except BaseException as exc:
                stopped = stopped_by(exc)
                raise
    finally:
        if entered:
            record = tracer.record()
            if stopped:  # the trace holds only what the run did before it was stopped
                record.update(complete=False, stopped=stopped)
            keep(record)


def stopped_by(exc: BaseException) -> str:
    """Why the traced work ended early, in one line for io_trace.json and replay.fio's header."""
    if isinstance(exc, KeyboardInterrupt):
        return "the run was interrupted (SIGINT or SIGTERM)"
    first = (str(exc).splitlines() or [""])[0][:240]
    return f"the run was stopped: {first or type(exc).__name__}"
