"""What error codes and health reasons mean, in words: the package's error reference.

The reference is ``docs/errors.md`` (shipped in the wheel as
``benchledger/dashboard/errors.md``). Each table row of it is
``| `code` | meaning | what to do |``; families are written with a
``<code>`` placeholder (``benchmark.campaign.error.<code>``), so a reason such
as ``benchmark.campaign.error.example.timeout`` is explained by its family,
and the inner code by its own row when it has one.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import attrs

from benchledger.domain.campaign_codes import code_of_reason

_ROW = re.compile(r"^\| `([^`]+)` \| (.*?) \| (.*?) \|\s*$", re.MULTILINE)
_MARKUP = re.compile(r"[`*]")
UNKNOWN = "not in the error reference"


@attrs.frozen
class Explanation:
    code: str
    meaning: str
    action: str
    inner: Explanation | None = None

    def as_payload(self) -> dict[str, object]:
        return {
            "code": self.code,
            "meaning": self.meaning,
            "action": self.action,
            "inner": None if self.inner is None else self.inner.as_payload(),
        }


def reference_path() -> Path:
    """The error reference: in the wheel, else the source tree's docs/errors.md."""
    packaged = Path(__file__).resolve().parent / "errors.md"
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parents[3] / "docs" / "errors.md"


def _plain(text: str) -> str:
    return _MARKUP.sub("", text).strip()


@functools.cache
def rows() -> dict[str, tuple[str, str]]:
    """code -> (meaning, what to do), for every documented code."""
    path = reference_path()
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8")
    return {code: (_plain(meaning), _plain(action)) for code, meaning, action in _ROW.findall(text)}


def explain(code: str) -> Explanation:
    """The reference's words for ``code`` (a family's, with the inner code explained too)."""
    table = rows()
    if code in table:
        meaning, action = table[code]
        return Explanation(code, meaning, action)
    families = sorted((f for f in table if f.endswith("<code>")), key=len, reverse=True)
    for family in families:
        meaning, action = table[family]
        prefix = family[: -len("<code>")]
        if code.startswith(prefix) and len(code) > len(prefix):
            # An error reason names its code without the namespace: the full code back.
            inner_code = code_of_reason(code) or code[len(prefix) :]
            found = explain(inner_code)
            inner = found if found.meaning != UNKNOWN else None
            words = meaning.replace("<code>", inner_code)
            return Explanation(code, words, action.replace("<code>", inner_code), inner)
    return Explanation(code, UNKNOWN, "see the error reference (docs/errors.md)")
