"""results.tree.aside: a function worked out in a forked process answers as the function does,
its head first, and an error it meets is raised in the caller, where it belongs."""

from __future__ import annotations

import os
import time

import pytest

from mlpstorage_py.results.tree.aside import Aside


def test_the_answer_comes_back_whole():
    parent = os.getpid()
    answer = Aside(lambda: {"pid": os.getpid(), "data": [1, 2.5, None, "x"]}, len).result()
    assert answer["data"] == [1, 2.5, None, "x"]
    assert answer["pid"] != parent or not hasattr(os, "fork")


def test_an_error_is_raised_here():
    def broken() -> None:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        Aside(broken, len).result()


def test_the_head_comes_first_and_the_answer_after():
    aside = Aside(lambda: {"edition": "3.0", "leaves": list(range(1000))}, lambda found: found["edition"])
    assert aside.head() == "3.0"
    assert aside.result()["leaves"] == list(range(1000))
    assert aside.head() == "3.0"


def test_an_error_is_raised_by_the_head_too():
    def broken() -> None:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        Aside(broken, len).head()


def test_a_forked_child_of_the_caller_works_it_out_itself():
    """A worker forked after the aside never reads the caller's pipe (the answer stays the caller's)."""
    aside = Aside(lambda: os.getpid(), lambda pid: pid)
    if not hasattr(os, "fork"):
        return
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the worker: its own answer, worked out here
        os.write(write, str(aside.result()).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    assert int(os.read(read, 64)) == child
    os.close(read)
    assert aside.head() != child and aside.result() != child


def test_the_process_ends_when_the_caller_goes_without_the_answer():
    """A caller that exits having taken only the head (or nothing) leaves no process behind,
    blocked on an answer too large for the pipe."""
    if not hasattr(os, "fork"):
        return
    read, write = os.pipe()
    caller = os.fork()
    if caller == 0:
        aside = Aside(lambda: list(range(10 ** 5)), len)  # its pickle fills the pipe
        os.write(write, str(aside._process.pid).encode())
        aside.head()
        os._exit(0)  # no atexit: nothing ends the aside process but its broken pipe
    os.close(write)
    pid = int(os.read(read, 64))
    os.close(read)
    os.waitpid(caller, 0)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        pytest.fail("the aside process outlived its caller")
