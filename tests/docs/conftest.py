"""Tests of the documentation: the tutorial's commands run, the leaderboard regenerates."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "tutorial: runs every command of docs/tutorial.md (minutes of CPU); select with -m tutorial"
    )
