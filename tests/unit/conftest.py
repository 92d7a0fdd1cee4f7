"""Hypothesis profiles: "ci" (no deadline, 100 examples) and "dev" (the default).

Pick one with ``HYPOTHESIS_PROFILE`` (tox sets ``ci``); deadlines are off in CI
because shared runners stall at random and a timing flake is not a finding.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", deadline=None, max_examples=100)
settings.register_profile("dev", max_examples=50)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
