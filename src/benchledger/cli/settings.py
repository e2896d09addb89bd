"""What the top-level options decided, passed to every command: the database to use,
how to log, and the signing keys results are signed and verified with."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click

from benchledger.cli.output import (
    DATABASE_MISSING,
    DATABASE_UNSUPPORTED,
    DATABASE_URL_INVALID,
    CommandError,
)

SUPPORTED = (
    "benchledger runs on SQLite (sqlite:///PATH) and PostgreSQL "
    "(postgresql+psycopg://USER:PASSWORD@HOST/DB, psycopg 3: pip install 'psycopg[binary]')"
)
#: Backends SQLAlchemy knows that benchledger does not run on.
_OTHER_BACKENDS = ("mysql", "mariadb", "oracle", "mssql")


def check_backend(url: str | None) -> None:
    """Refuse, in one line, a URL for a backend or driver benchledger does not support."""
    import sqlalchemy as sa

    from benchledger.db import resolve_url

    try:
        parsed = sa.make_url(resolve_url(url))
    except (sa.exc.ArgumentError, ValueError) as error:
        raise CommandError(
            DATABASE_URL_INVALID, f"the database URL is not usable: {error}"
        ) from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend in _OTHER_BACKENDS:
        raise CommandError(DATABASE_UNSUPPORTED, f"{backend} is not supported: {SUPPORTED}")
    if backend == "sqlite" and driver not in ("", "pysqlite"):
        raise CommandError(
            DATABASE_UNSUPPORTED, f"the sqlite+{driver} driver is not supported: {SUPPORTED}"
        )
    if backend in ("postgresql", "postgres") and driver != "psycopg":
        raise CommandError(
            DATABASE_UNSUPPORTED,
            f"{parsed.drivername}:// is not supported (benchledger is synchronous and "
            f"uses psycopg 3): write postgresql+psycopg://...; {SUPPORTED}",
        )


if TYPE_CHECKING:
    from benchledger.adapters.verification import HmacAttestationSigner, HmacAttestationVerifier
    from benchledger.cli.logs import LogSettings
    from benchledger.db import Database
    from benchledger.faults import Outage, OutagePolicy


# -- signing keys ----------------------------------------------------------------------------

SIGNING_KEY_FILE_ENV: Final = "BENCHLEDGER_SIGNING_KEY_FILE"
SIGNING_KEY_ENV: Final = "BENCHLEDGER_SIGNING_KEY"
SIGNING_KEY_INVALID: Final = "ledger.input.signing_key_invalid"
#: The shortest key accepted (what ``HmacAttestationSigner`` requires), in bytes.
MIN_KEY_BYTES: Final = 16
_HEX: Final = re.compile(r"(?:[0-9a-fA-F]{2})+")


def key_id(key: bytes) -> str:
    """A key's public name, stored in each result it signs: ``key-`` and 16 hex digits of
    its sha256 (it names the key without revealing it)."""
    return "key-" + hashlib.sha256(key).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class SigningKeys:
    """A key ring: the first key signs new results; every key verifies stored ones.

    Written as text: hex keys (at least 32 hex digits, 16 bytes) separated by
    white space or new lines, ``#`` starting a comment. Rotating a key puts the
    new one first and keeps the old ones after it, so results they signed still
    verify.
    """

    keys: tuple[bytes, ...] = dataclasses.field(repr=False)
    source: str

    @classmethod
    def parse(cls, text: str, source: str) -> SigningKeys:
        """Read a key ring (``ledger.input.signing_key_invalid`` naming ``source``)."""
        words = [word for line in text.splitlines() for word in line.split("#")[0].split()]
        if not words:
            raise CommandError(SIGNING_KEY_INVALID, f"{source} holds no key")
        keys: list[bytes] = []
        for number, word in enumerate(words, 1):
            if _HEX.fullmatch(word) is None:
                raise CommandError(
                    SIGNING_KEY_INVALID,
                    f"key {number} of {source} is not hex (an even number of 0-9, a-f)",
                )
            key = bytes.fromhex(word)
            if len(key) < MIN_KEY_BYTES:
                raise CommandError(
                    SIGNING_KEY_INVALID,
                    f"key {number} of {source} is {len(key)} bytes: a key needs at least "
                    f"{MIN_KEY_BYTES} ({2 * MIN_KEY_BYTES} hex digits; 32 bytes recommended)",
                )
            if key not in keys:
                keys.append(key)
        return cls(tuple(keys), source)

    @classmethod
    def read(cls, path: str) -> SigningKeys:
        """The key ring in the file at ``path``."""
        source = f"signing key file {path}"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise CommandError(SIGNING_KEY_INVALID, f"cannot read {source}: {reason}") from None
        return cls.parse(text, source)

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The keys' public names, the signing key's first."""
        return tuple(key_id(key) for key in self.keys)

    def signer(self) -> HmacAttestationSigner:
        """Signs with the first key (its id is :func:`key_id`)."""
        from benchledger.adapters.verification import HmacAttestationSigner

        return HmacAttestationSigner(key_id(self.keys[0]), self.keys[0])

    def verifier(self) -> HmacAttestationVerifier:
        """Accepts results signed by any key of the ring (and structurally valid)."""
        from benchledger.adapters.verification import HmacAttestationVerifier

        return HmacAttestationVerifier({key_id(key): key for key in self.keys})


# -- what every command gets ---------------------------------------------------------------


class Settings:
    """What the top-level options decided, passed to every command.

    ``signing_key_file`` (``--signing-key-file``) wins over ``signing_key`` (the
    ``BENCHLEDGER_SIGNING_KEY`` text); either is read when a command first needs
    it (:meth:`signing_keys`), so a bad key refuses only the commands that sign
    or verify.
    """

    def __init__(
        self,
        url: str | None,
        *,
        logging: LogSettings | None = None,
        signing_key_file: str | None = None,
        signing_key: str | None = None,
    ) -> None:
        from benchledger.cli.logs import LogSettings

        self.url = url
        self.logging = logging or LogSettings()
        self.signing_key_file = signing_key_file
        self._signing_key = signing_key

    @functools.cached_property
    def _keys(self) -> SigningKeys | None:
        if self.signing_key_file is not None:
            return SigningKeys.read(self.signing_key_file)
        if self._signing_key is not None:
            return SigningKeys.parse(self._signing_key, SIGNING_KEY_ENV)
        return None

    def signing_keys(self) -> SigningKeys | None:
        """The key ring results are signed and verified with, if one was given."""
        return self._keys

    def service_options(self, *, pass_score: float | None = None) -> dict[str, Any]:
        """``CampaignService`` keyword options: a verifier accepting only results signed
        by the key ring (when there is one), a report builder counting passes at
        ``pass_score`` (when given). Picklable, for worker processes."""
        options: dict[str, Any] = {}
        keys = self.signing_keys()
        if keys is not None:
            options["result_verifier"] = keys.verifier()
        if pass_score is not None:
            from benchledger.adapters.reporting import DefaultReportBuilder

            options["report_builder"] = DefaultReportBuilder(pass_score)
        return options

    def database(
        self,
        *,
        create: bool = False,
        check_schema: bool = True,
        outage: Outage | OutagePolicy | None = None,
    ) -> Database:
        """The database; refuses a SQLite file that does not exist unless ``create``.

        The schema check rides out a restart within ``outage`` (default: the
        library's start-up budget, a few seconds; ``campaign work`` passes the
        workers' five minutes). ``Database`` itself codes a bad URL
        (``ledger.database.url_invalid``, ``unsupported``, ``driver_missing``).
        """
        from benchledger.db import Database

        check_backend(self.url)
        database = Database(self.url)
        path = database.sqlite_path
        if path is not None and not create and not path.exists():
            database.dispose()
            raise CommandError(
                DATABASE_MISSING,
                f"no database at {path}: create it with `benchledger db upgrade`",
            )
        if check_schema:
            try:
                database.require_current_schema(outage=outage)
            except BaseException:
                database.dispose()
                raise
        return database


pass_settings = click.make_pass_decorator(Settings)
