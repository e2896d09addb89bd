"""Result verifiers: structural checks, and HMAC-SHA256 attestation by a trusted evaluator."""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Mapping
from typing import Any

from benchledger.domain.campaign import is_identifier
from benchledger.domain.campaign_plan import CampaignPolicy
from benchledger.domain.canonical import canonical_json, is_sha256
from benchledger.ports.campaign import ResultVerifier

ATTESTATION_KEY = "attestation"
ATTESTATION_ALGORITHM = "hmac-sha256"


class ResultRejected(ValueError):
    """A result failed verification; the message says why (never the result's text)."""


def _score(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 1
    )


class StructuralResultVerifier:
    """The default verifier: a case result in the expected shape, bound to the policy's suite.

    Required: ``target_locale`` (one of the policy's locales), ``suite`` with
    ``case_key`` and ``suite_sha256`` (the policy's suite), and ``score`` in
    [0, 1]. Optional: ``passed`` (bool). Other keys are kept as given.
    """

    def verify_result(self, result: Mapping[str, Any], policy: CampaignPolicy) -> None:
        if not isinstance(result, Mapping):
            raise ResultRejected("result is not an object")
        if result.get("target_locale") not in policy.required_locales:
            raise ResultRejected("target_locale is not a required locale of the policy")
        suite = result.get("suite")
        if not isinstance(suite, Mapping) or not is_identifier(suite.get("case_key")):
            raise ResultRejected("suite.case_key is missing")
        if suite.get("suite_sha256") != policy.suite_sha256:
            raise ResultRejected("suite.suite_sha256 is not the policy's suite")
        if not _score(result.get("score")):
            raise ResultRejected("score must be a number in [0, 1]")
        if "passed" in result and not isinstance(result["passed"], bool):
            raise ResultRejected("passed must be a boolean")


def _message(result: Mapping[str, Any], policy_sha256: str) -> bytes:
    unsigned = {key: value for key, value in result.items() if key != ATTESTATION_KEY}
    return canonical_json({"policy_sha256": policy_sha256, "result": unsigned}).encode("utf-8")


class HmacAttestationSigner:
    """Signs results for one campaign policy, as a trusted evaluator does.

    The signature covers the canonical result (without its ``attestation``)
    and the policy's sha256, so a signed result cannot be replayed into
    another campaign or edited without the key.
    """

    def __init__(self, key_id: str, key: bytes) -> None:
        if not is_identifier(key_id) or not isinstance(key, bytes) or len(key) < 16:
            raise ValueError("an attestation key needs an id and at least 16 bytes")
        self.key_id = key_id
        self._key = key

    def sign(self, result: Mapping[str, Any], policy_sha256: str) -> dict[str, Any]:
        if not is_sha256(policy_sha256):
            raise ValueError("policy_sha256 must be a sha256 digest")
        signature = hmac.new(self._key, _message(result, policy_sha256), hashlib.sha256)
        signed = {key: value for key, value in result.items() if key != ATTESTATION_KEY}
        signed[ATTESTATION_KEY] = {
            "algorithm": ATTESTATION_ALGORITHM,
            "key_id": self.key_id,
            "signature": signature.hexdigest(),
        }
        return signed


class HmacAttestationVerifier:
    """Accepts only results signed (HMAC-SHA256) by one of the trusted evaluator keys.

    ``keys`` maps key id to secret. The structural checks of ``inner`` (default
    :class:`StructuralResultVerifier`) run first.
    """

    def __init__(self, keys: Mapping[str, bytes], inner: ResultVerifier | None = None) -> None:
        if not keys or not all(
            is_identifier(key_id) and isinstance(key, bytes) and len(key) >= 16
            for key_id, key in keys.items()
        ):
            raise ValueError("trusted keys map ids to secrets of at least 16 bytes")
        self._keys = dict(keys)
        self._inner = inner if inner is not None else StructuralResultVerifier()

    def verify_result(self, result: Mapping[str, Any], policy: CampaignPolicy) -> None:
        self._inner.verify_result(result, policy)
        attestation = result.get(ATTESTATION_KEY)
        if not isinstance(attestation, Mapping) or set(attestation) != {
            "algorithm",
            "key_id",
            "signature",
        }:
            raise ResultRejected("result carries no attestation")
        if attestation["algorithm"] != ATTESTATION_ALGORITHM:
            raise ResultRejected("attestation algorithm is not hmac-sha256")
        key = self._keys.get(attestation["key_id"])
        if key is None:
            raise ResultRejected("attestation key is not trusted")
        expected = hmac.new(key, _message(result, policy.sha256), hashlib.sha256).hexdigest()
        signature = attestation["signature"]
        if not isinstance(signature, str) or not hmac.compare_digest(expected, signature):
            raise ResultRejected("attestation signature does not match")
