"""Canonical JSON and sha256 helpers shared by every domain.

Canonical JSON is the stored encoding: keys sorted, no whitespace, UTF-8 text
(``ensure_ascii=False``), no NaN or infinity. It is *strict*: only ``None``,
``bool``, ``int``, finite ``float``, ``str`` (encodable as UTF-8), ``list`` /
``tuple`` and ``dict`` with ``str`` keys are accepted, so that
``json.loads(canonical_json(v))`` re-encodes to exactly the same text. Anything
else raises :class:`CanonicalJsonError` (a ``ValueError``); callers translate
it into their own error code.

Integers have at most 4,300 decimal digits (:data:`MAX_INT_DIGITS`, Python's
default limit of int-to-text conversion, fixed here so that every host
encodes the same values); a longer one raises :class:`CanonicalJsonTooLarge`,
the kind of :class:`CanonicalJsonError` that says the value is too large
rather than malformed. Text is refused when it holds a lone surrogate (it is
not UTF-8 text), and nesting is limited to 64 levels.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from typing import Any

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_MAX_DEPTH = 64
#: The most decimal digits an integer may have (Python's default int-to-text limit).
MAX_INT_DIGITS = 4_300
_INT_BOUND = 10**MAX_INT_DIGITS


class CanonicalJsonError(ValueError):
    """The value cannot be represented as canonical JSON."""


class CanonicalJsonTooLarge(CanonicalJsonError):
    """The value is JSON data, but too large to encode (an integer of over 4,300 digits)."""


def _check(value: Any, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise CanonicalJsonError("value is nested too deeply")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        # Compared, never converted: turning a huge int into text is what fails (and is slow).
        if not -_INT_BOUND < value < _INT_BOUND:
            raise CanonicalJsonTooLarge(f"integer has more than {MAX_INT_DIGITS} digits")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CanonicalJsonError("non-finite number")
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise CanonicalJsonError("string is not valid UTF-8 text") from None
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check(item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalJsonError("object keys must be strings")
            _check(key, depth + 1)
            _check(item, depth + 1)
        return
    raise CanonicalJsonError(f"unsupported JSON type: {type(value).__name__}")


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_INNERMOST = re.compile(r"[\[{][^\[\]{}]*[\]}]")


def _shallow(text: str) -> bool:
    """Whether the containers of encoder-written ``text`` nest at most 64 deep."""
    if text.count("[") + text.count("{") <= _MAX_DEPTH:
        return True
    bare = _STRING.sub("", text)
    for _ in range(_MAX_DEPTH):  # each pass removes the innermost containers
        bare, removed = _INNERMOST.subn("", bare)
        if not removed:
            break
    return "[" not in bare and "{" not in bare


_ENCODE = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
).encode


def _encoded(value: Any) -> str | None:
    """The canonical text of ``value`` when the encoder alone proves it, else ``None``.

    The encoder refuses NaN, infinity, unsupported types and (under Python's
    default int-to-text limit, which is :data:`MAX_INT_DIGITS`) too long
    integers. What it lets through, :func:`_check` may still refuse: a non-string
    key (the encoder writes it as text, so the text no longer parses back to
    ``value``), nesting beyond the limit (impossible with at most that many
    brackets) and a lone surrogate (the text is not UTF-8). Whatever is in doubt
    takes the full walk.
    """
    if sys.get_int_max_str_digits() != MAX_INT_DIGITS:
        return None
    try:
        text = _ENCODE(value)
        if not _shallow(text):
            return None
        text.encode("utf-8")
        if type(value) is not str and json.loads(text) != value:
            return None
    except (ValueError, TypeError, RecursionError):
        return None
    return text


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of ``value`` (strict; see module doc)."""
    text = _encoded(value)
    if text is not None:
        return text
    _check(value, 0)
    try:
        return json.dumps(
            value, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
        )
    except ValueError:
        # Only when the host lowered Python's int-to-text limit below MAX_INT_DIGITS.
        raise CanonicalJsonTooLarge("integer is too long for this interpreter") from None


def canonical_value(value: Any) -> Any:
    """Return ``value`` as plain JSON data (tuples become lists), canonical-checked."""
    return json.loads(canonical_json(value))


def parse_canonical_json(text: str) -> Any:
    """Parse ``text`` and require that it is exactly the canonical encoding.

    Raises :class:`CanonicalJsonError` when the text is not JSON or is JSON in a
    non-canonical form (other key order, whitespace, escapes).
    """
    if not isinstance(text, str):
        raise CanonicalJsonError("stored JSON must be text")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise CanonicalJsonError("text is not JSON") from None
    if _parsed_is_canonical(value, text):
        return value
    if canonical_json(value) != text:
        raise CanonicalJsonError("text is not canonical JSON")
    return value


def _parsed_is_canonical(value: Any, text: str) -> bool:
    """Whether ``text``, which parsed to ``value``, is its canonical JSON (fast cases only).

    What JSON parses to has only string keys and plain types; the rest of
    :func:`_check` is what :func:`_encoded` proves.
    """
    if sys.get_int_max_str_digits() != MAX_INT_DIGITS:
        return False
    try:
        if _ENCODE(value) != text or not _shallow(text):
            return False
        text.encode("utf-8")
    except (ValueError, TypeError, RecursionError):
        return False
    return True


def sha256_text(text: str) -> str:
    """Hex sha256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_json(value: Any) -> str:
    """Hex sha256 of the canonical JSON of ``value``."""
    return sha256_text(canonical_json(value))


def is_sha256(value: Any) -> bool:
    """Whether ``value`` is a lowercase hex sha256 digest."""
    return isinstance(value, str) and SHA256_HEX.fullmatch(value) is not None
