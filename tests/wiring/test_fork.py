"""The one registry of fork hooks: hooks run in a forked child, object hooks are held weakly."""

from __future__ import annotations

import gc
import os
import sys

import pytest

from cp_observe import _fork

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32", reason="needs os.fork")


class _Owner:
    def __init__(self, write_fd: int) -> None:
        self.write_fd = write_fd

    def after_fork(self) -> None:
        os.write(self.write_fd, b"method ")


def _child_output(read_fd: int, write_fd: int) -> bytes:
    pid = os.fork()
    if pid == 0:  # the child: hooks have run; say so and leave at once
        os.write(write_fd, b"done")
        os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    chunks = []
    while chunk := os.read(read_fd, 1024):
        chunks.append(chunk)
    os.close(read_fd)
    return b"".join(chunks)


def test_hooks_run_in_the_child_in_order() -> None:
    """A function hook and a method hook both run in the child, in the order they were registered."""
    read_fd, write_fd = os.pipe()
    owner = _Owner(write_fd)
    _fork.at_fork(lambda: os.write(write_fd, b"function ") if owner.write_fd == write_fd else None)
    _fork.at_fork_method(owner.after_fork)
    assert _child_output(read_fd, write_fd) == b"function method done"
    owner.write_fd = -1  # the function hook is module-lifetime: keep it quiet in later forks


def test_a_failing_hook_does_not_stop_the_others() -> None:
    """A hook that raises in the child is passed over; the next one still runs."""
    read_fd, write_fd = os.pipe()
    armed = [True]

    def broken() -> None:
        if armed[0]:
            raise RuntimeError("boom")

    owner = _Owner(write_fd)
    _fork.at_fork(broken)
    _fork.at_fork_method(owner.after_fork)
    assert _child_output(read_fd, write_fd) == b"method done"
    armed[0] = False


def test_method_hooks_are_forgotten_with_their_object() -> None:
    """Dropping the object drops its hook: making and dropping processors does not grow the registry."""
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    os.close(write_fd)
    before = len(_fork._hooks)
    for _ in range(50):
        _fork.at_fork_method(_Owner(-1).after_fork)
        gc.collect()
    assert len(_fork._hooks) <= before + 1


def test_the_sampler_registry_is_usable_in_a_child_forked_while_its_lock_was_held() -> None:
    """A child forked while another thread held the sampler registry's lock still applies registrations."""
    from cp_observe._config import _runtime
    from cp_observe._config._sampling import TraceIdRatio

    read_fd, write_fd = os.pipe()
    _runtime._LIVE_LOCK.acquire()  # as if another thread were registering at the moment of the fork
    try:
        pid = os.fork()
        if pid == 0:  # the child: the parent's holder does not exist here
            _runtime.register_sampler(-21, TraceIdRatio(0.25))
            os.write(write_fd, b"applied" if -21 in _runtime._LIVE_SAMPLERS else b"queued")
            os._exit(0)
    finally:
        _runtime._LIVE_LOCK.release()
    os.close(write_fd)
    os.waitpid(pid, 0)
    assert os.read(read_fd, 64) == b"applied"
    os.close(read_fd)
