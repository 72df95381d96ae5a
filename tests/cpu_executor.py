"""An executor declaring its own default concurrency (as Ray's does: the cluster's CPUs), for
tests/test_executor_concurrency.py; it plays like the local one."""

from __future__ import annotations

from toolgym.runner import LocalExecutor


class FourSlots(LocalExecutor):
    """The local executor, with a default concurrency of 4."""

    name = "four-slots"

    def default_concurrency(self) -> int:
        return 4
