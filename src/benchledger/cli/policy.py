"""Which field of a policy file is wrong, and by which rule (for ``policy_invalid``).

The domain refuses a bad policy with the bare code
``benchmark.campaign.policy_invalid``; a person editing a policy file needs
to know which field to fix. :func:`policy_problem` applies the same rules
field by field (the domain's own predicates) and names the first one broken.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def policy_problem(document: Any) -> str:
    """A one-line reason the policy document is refused: the field and the rule."""
    from benchledger.domain import campaign as dom
    from benchledger.domain.campaign_plan import CampaignPolicy
    from benchledger.domain.canonical import is_sha256
    from benchledger.errors import CampaignBlocked

    fields = tuple(attr.name for attr in CampaignPolicy.__attrs_attrs__ if attr.init)
    if not isinstance(document, Mapping):
        return f"a policy is a JSON object with the fields {', '.join(fields)}"
    missing = [name for name in fields if name not in document]
    if missing:
        return f"field {missing[0]} is missing (a policy has exactly: {', '.join(fields)})"
    unknown = sorted(str(name) for name in document if name not in fields)
    if unknown:
        return (
            f"field {unknown[0]} is not a policy field (a policy has exactly: {', '.join(fields)})"
        )
    if not is_sha256(document["suite_sha256"]):
        return "field suite_sha256 must be 64 lowercase hex digits (the suite's sha256)"
    locales = document["required_locales"]
    if not isinstance(locales, list) or not 1 <= len(locales) <= dom.MAX_LOCALES:
        return f"field required_locales must be a list of 1 to {dom.MAX_LOCALES} locales"
    for locale in locales:
        if not isinstance(locale, str) or dom.LOCALE.fullmatch(locale) is None:
            return (
                f"field required_locales holds {locale!r}, not a locale tag like de-DE "
                "(letters, then -subtags of letters and digits)"
            )
    if len(set(locales)) != len(locales):
        return "field required_locales lists a locale twice"
    try:
        dom.timestamp(document["valid_until"])
    except CampaignBlocked:
        return "field valid_until must be finite, non-negative epoch seconds (a number)"
    for name in fields:
        if name.startswith("candidate_") and not dom.is_identifier(document[name]):
            return (
                f"field {name} must be text of 1 to {dom.MAX_IDENTIFIER_LENGTH} characters, "
                "without surrounding spaces or control characters, in Unicode NFC"
            )
    return "the policy breaks a rule of CampaignPolicy (see docs/cli.md, Policy file)"
