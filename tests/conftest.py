"""Shared fixtures: the harness's plugin (``spark``, ``driver``, ``postgres``; see
:mod:`sparklink.testing.fixtures`). Everything is real: local Spark (``local[2]``), files in
pytest's temporary directories, a PostgreSQL server started with ``initdb`` / ``pg_ctl``.

Also the closing line of every run, ``N passed, N failed`` (``, N skipped`` when some were),
alone on a line for CI logs; errors in set-up or tear-down count as failed.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest_plugins = ["sparklink.testing.fixtures"]

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)``: mount a tmpfs of ``size`` (``"64k"``) under ``tmp_path`` and return its
    mount point, unmounted after the test (a small disk that fills up). Needs root: skips otherwise."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = []

    def mount(size: str):
        mount_point = tmp_path / f"disk{len(mounted)}"
        mount_point.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)], check=True)
        mounted.append(mount_point)
        return mount_point

    yield mount
    for mount_point in mounted:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    result = yield  # the outermost wrapper: after pytest's own summaries (durations, short test summary)
    if config.option.collectonly:
        return result
    stats = terminalreporter.stats

    def count(*keys):
        return sum(len(stats.get(key, [])) for key in keys)

    line = f"{count('passed')} passed, {count('failed', 'error')} failed"
    skipped = count("skipped")
    if skipped:
        line += f", {skipped} skipped"
    terminalreporter.write_line(line)
    return result
