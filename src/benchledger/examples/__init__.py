"""Bundled example data: a suite of website-localization cases and a campaign policy.

- ``suite.json``: the example suite (300 cases: UI strings and page prose,
  several source locales and content types);
- ``policy.json``: a campaign policy for it (4 target locales, one candidate);
- :mod:`benchledger.examples.evaluator`: the deterministic example evaluator.

``benchledger campaign create --policy policy.json --suite suite.json`` takes
these files as they are; :func:`example_suite` and :func:`example_policy`
load them (optionally cut to the first ``cases`` cases, or with another
candidate) for the demo and for tests.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from benchledger.domain.campaign_plan import CampaignPolicy, Suite


def data_path(name: str) -> Path:
    """The path of a bundled data file (``suite.json``, ``policy.json``)."""
    return Path(str(resources.files(__name__).joinpath(name)))


def _load(name: str) -> Any:
    return json.loads(data_path(name).read_text(encoding="utf-8"))


def example_suite(cases: int | None = None) -> Suite:
    """The bundled suite, or its first ``cases`` cases."""
    suite = Suite.from_manifest(_load("suite.json"))
    if cases is None or cases >= len(suite.cases):
        return suite
    if cases < 1:
        raise ValueError("an example suite needs at least one case")
    return Suite(suite.cases[:cases])


def example_policy(suite: Suite | None = None, **changes: Any) -> CampaignPolicy:
    """The bundled policy, bound to ``suite`` (default: the bundled suite) with ``changes``."""
    policy = CampaignPolicy.from_payload(_load("policy.json"))
    if suite is not None and suite.sha256 != policy.suite_sha256:
        changes = {"suite_sha256": suite.sha256, **changes}
    return attrs.evolve(policy, **changes) if changes else policy


__all__ = ["data_path", "example_policy", "example_suite"]
