"""Regenerate the bundled example data: ``python -m benchledger.examples._generate``.

The output is deterministic (no randomness, no clock), and committed: the
demo, the tests and users read ``suite.json``, ``policy.json``, ``study.json``
and ``materials.json``; a test checks they match what this script writes.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchledger.domain.campaign_plan import CampaignPolicy, Suite, SuiteCase
from benchledger.examples.study import example_materials, example_study_spec

HERE = Path(__file__).resolve().parent

#: 2100-01-01T00:00:00Z: the example policy stays valid for the demo's lifetime.
VALID_UNTIL = 4_102_444_800.0
TARGET_LOCALES = ("de-DE", "fr-FR", "ja-JP", "pt-BR")
CASE_COUNT = 300

_PRODUCTS = (
    "travel mug",
    "desk lamp",
    "rain jacket",
    "coffee grinder",
    "wireless keyboard",
    "yoga mat",
    "water bottle",
    "backpack",
    "notebook",
    "headphones",
)
_UI = (
    "Add {product} to your cart",
    "Your {product} ships within {n} business days.",
    "Only {n} left in stock: order your {product} today.",
    "Save {n}% on every {product} this week.",
    "Free returns on your {product} for {n} days.",
)
_PROSE = (
    "<p>Our {product} is made from recycled materials and tested for {n} months "
    "before it reaches you.</p>",
    "## Care\n\nWipe the {product} with a damp cloth. Do not use it for {n} hours after cleaning.",
    "Questions about your {product}? Our team answers within {n} hours, every day of the week.",
    "The {product} comes with a {n}-year warranty. Keep your receipt to claim it.",
)
_CONTENT_TYPES = ("text/plain", "text/html", "text/markdown", "text/plain")
_SOURCE_LOCALES = ("en-US", "en-US", "en-GB", "en-US", "es-MX")


def _case(index: int) -> SuiteCase:
    product = _PRODUCTS[index % len(_PRODUCTS)]
    number = 2 + (index * 7) % 29
    if index % 3 == 2:
        template = _PROSE[(index // 3) % len(_PROSE)]
        content_type = "text/html" if template.startswith("<p>") else _CONTENT_TYPES[index % 4]
        if template.startswith("##"):
            content_type = "text/markdown"
        kind = "page"
    else:
        template = _UI[index % len(_UI)]
        content_type = "text/plain"
        kind = "ui"
    return SuiteCase(
        key=f"{kind}-{index:04d}",
        source_id=f"shop/{kind}/{index:04d}",
        source_revision=f"r{1 + index % 4}",
        source_text=template.format(product=product, n=number),
        source_locale=_SOURCE_LOCALES[index % len(_SOURCE_LOCALES)],
        content_type=content_type,
    )


def example_suite() -> Suite:
    return Suite(_case(index) for index in range(CASE_COUNT))


def example_policy(suite: Suite) -> CampaignPolicy:
    return CampaignPolicy(
        suite_sha256=suite.sha256,
        required_locales=TARGET_LOCALES,
        valid_until=VALID_UNTIL,
        candidate_provider_id="example-provider",
        candidate_model_id="example-mt",
        candidate_model_version="2.0",
        candidate_software_version="benchledger-example-1",
        candidate_glossary_version="shop-glossary-3",
        candidate_policy_version="shop-style-7",
    )


def rendered() -> dict[str, str]:
    """The text of every generated file, by name."""
    suite = example_suite()
    files: dict[str, object] = {
        "suite.json": suite.manifest(),
        "policy.json": example_policy(suite).as_payload(),
        "study.json": example_study_spec(),
        "materials.json": example_materials(),
    }
    return {
        name: json.dumps(value, indent=1, ensure_ascii=False) + "\n"
        for name, value in files.items()
    }


def main() -> None:
    for name, text in rendered().items():
        (HERE / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
