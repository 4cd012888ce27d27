"""results.tree.aside: a function worked out in a forked process answers as the function does,
and an error it meets is raised in the caller, where it belongs."""

from __future__ import annotations

import os

import pytest

from mlpstorage_py.results.tree.aside import Aside


def test_the_answer_comes_back_whole():
    parent = os.getpid()
    answer = Aside(lambda: {"pid": os.getpid(), "data": [1, 2.5, None, "x"]}).result()
    assert answer["data"] == [1, 2.5, None, "x"]
    assert answer["pid"] != parent or not hasattr(os, "fork")


def test_an_error_is_raised_here():
    def broken() -> None:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        Aside(broken).result()
