"""``device``: what the ``gpu``-marked tests read onto (tests/support/devices.py says how it is chosen)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.devices import chosen_device


@pytest.fixture
def device() -> Any:
    return chosen_device()
