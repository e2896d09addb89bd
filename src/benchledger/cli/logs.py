"""How the command line logs: text or JSON lines on stderr (``-v``, ``--log-level``,
``--log-format``).

Text (the default) is for people: ``INFO  [benchledger.faults] ...``. JSON is for
log collectors: one object a line, with only these keys:

- ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``;
- ``campaign``, ``work_id``, ``worker``, ``code``, when the log call passed them
  (``log.warning(..., extra={"campaign": cid, "code": code})``);
- ``error_type`` (and ``code``, when the exception has one) for a record logged
  with an exception: never its traceback or its locals.

Nothing else a record carries is written, so an ``extra=`` holding a result, a
token or a secret stays out of the log. Messages themselves are scrubbed of
what looks like a credential (``token=...``, ``Bearer ...``, a password in a
URL), and SQL parameters (``-vv``: they hold results) are not logged. In JSON
mode whatever else the command writes on stderr (progress lines, the
``error: <code>: ...`` refusal, a library's warning) becomes a record too
(logger ``benchledger.cli``; a refusal is level ``error`` with its ``code``), so
every line of stderr parses.

:class:`LogSettings` is what the options decided; it pickles, so a worker
process can apply the same settings (``settings.logging()`` in the child).
Only the standard library is imported: the command line loads this module
before any command runs.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re
import sys
import threading
from datetime import UTC, datetime
from typing import IO, Any, Final

LOG_FORMAT_ENV: Final = "BENCHLEDGER_LOG_FORMAT"
FORMATS: Final = ("text", "json")
LEVELS: Final = ("debug", "info", "warning", "error")
#: The name of the handler the command line installs (replaced, never stacked).
HANDLER_NAME: Final = "benchledger.cli"
#: The logger of what the command writes on stderr, as a JSON record.
STDERR_LOGGER: Final = "benchledger.cli"
#: Record attributes the JSON format carries when a log call passes them with ``extra=``.
CONTEXT_KEYS: Final = ("campaign", "work_id", "worker", "code")

_TEXT_FORMAT: Final = "%(levelname)-5.5s [%(name)s] %(message)s"
_REFUSAL: Final = re.compile(r"error: ([a-z0-9_]+(?:\.[a-z0-9_<>-]+)+): (.*)", re.DOTALL)
#: What looks like a credential in a message: ``token=...`` (a URL's query, a
#: setting), ``Authorization: Bearer ...``, the password of ``scheme://user:password@``.
_SECRETS: Final = (
    (
        re.compile(
            r"(?i)\b([\w-]*(?:token|password|passwd|secret|api[_-]?key|signing[_-]?key))"
            r"=([^&\s\"',;]+)"
        ),
        r"\1=[hidden]",
    ),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+"), r"\1 [hidden]"),
    (re.compile(r"(://[^/\s:@]*):[^/\s@]+@"), r"\1:[hidden]@"),
)


def scrub(text: str) -> str:
    """``text`` without what looks like a credential (see :data:`_SECRETS`)."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


@dataclasses.dataclass(frozen=True)
class LogSettings:
    """What ``-v`` / ``--log-level`` / ``--log-format`` decided; picklable.

    Calling it applies it (:func:`configure_logging`): a worker process started
    by the command gets the same logs that way.
    """

    verbose: int = 0
    level: str | None = None
    format: str = "text"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"log format must be one of {FORMATS}")
        if self.level is not None and self.level.lower() not in LEVELS:
            raise ValueError(f"log level must be one of {LEVELS}")

    @property
    def json(self) -> bool:
        return self.format == "json"

    @property
    def logging_level(self) -> int | None:
        """The level benchledger's loggers get, or ``None`` when nothing is configured
        (text without ``-v``: Python's own last-resort handler shows warnings)."""
        if self.level is not None:
            return int(getattr(logging, self.level.upper()))
        if self.verbose >= 2:
            return logging.DEBUG
        if self.verbose == 1:
            return logging.INFO
        return logging.WARNING if self.json else None

    def __call__(self) -> None:
        configure_logging(self)


def _iso_time(created: float) -> str:
    return (
        datetime.fromtimestamp(created, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


class JsonFormatter(logging.Formatter):
    """One JSON object a record, with the whitelisted keys only (see the module)."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": _iso_time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": scrub(record.getMessage()),
        }
        for key in CONTEXT_KEYS:
            value = record.__dict__.get(key)
            if value is not None:
                document[key] = scrub(str(value))
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            document["error_type"] = type(error).__name__
            code = getattr(error, "code", None)
            if isinstance(code, str) and "code" not in document:
                document["code"] = code
        return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


class _NoSqlParameters(logging.Filter):
    """Hides the parameters of SQLAlchemy's statement records (``-vv``): they hold results.

    SQLAlchemy logs a statement, then ``"[%s] %r"`` with its cache statistics and
    parameters: that second record keeps the statistics only.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("sqlalchemy.engine") and record.msg == "[%s] %r":
            record.msg = "[%s] [SQL parameters hidden]"
            record.args = tuple(record.args or ())[:1]
        return True


class _Scrubbed(logging.Filter):
    """Scrubs a record's message of credentials (see :func:`scrub`), for any format."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = scrub(record.getMessage()), None
        return True


class JsonLines(io.TextIOBase):
    """A stand-in for ``sys.stderr`` in JSON mode: each line written becomes a record.

    A line ``error: <code>: <message>`` (a refusal) is an ``error`` record with
    its code; any other line an ``info`` record of :data:`STDERR_LOGGER`. It
    says it is not a terminal, so nothing draws a live display into it.
    """

    def __init__(self, stream: IO[str], formatter: logging.Formatter) -> None:
        super().__init__()
        self.stream = stream
        self.formatter = formatter
        self._pending = ""
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "strict"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            self._pending += text
            *lines, self._pending = self._pending.split("\n")
            for line in lines:
                self._emit(line)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        with self._lock:
            if self._pending:
                self._emit(self._pending)
                self._pending = ""
        self.stream.flush()

    def _emit(self, line: str) -> None:
        line = line.rstrip("\r")
        if not line.strip():
            return
        refusal = _REFUSAL.fullmatch(line)
        level = logging.ERROR if refusal else logging.INFO
        record = logging.LogRecord(
            STDERR_LOGGER, level, "", 0, refusal.group(2) if refusal else line, None, None
        )
        if refusal:
            record.code = refusal.group(1)
        self.stream.write(self.formatter.format(record) + "\n")
        self.stream.flush()


def _loggers(level: int) -> dict[str, int]:
    loggers = {"benchledger": level, "alembic": level}
    if level <= logging.DEBUG:
        loggers["sqlalchemy.engine"] = logging.INFO
    return loggers


def _real_stderr() -> IO[str]:
    stream = sys.stderr
    return stream.stream if isinstance(stream, JsonLines) else stream


def _formatter(settings: LogSettings) -> logging.Formatter:
    return JsonFormatter() if settings.json else logging.Formatter(_TEXT_FORMAT)


def _handler(settings: LogSettings, stream: IO[str]) -> logging.Handler:
    handler = logging.StreamHandler(stream)
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(_formatter(settings))
    return handler


def _detach(name: str) -> None:
    logger = logging.getLogger(name)
    for old in [h for h in logger.handlers if h.get_name() == HANDLER_NAME]:
        logger.removeHandler(old)
        logger.setLevel(logging.NOTSET)
        logger.propagate = True


def configure_logging(settings: LogSettings) -> None:
    """Log benchledger and Alembic on stderr as ``settings`` say, replacing what an earlier
    call installed: INFO (``-v``), DEBUG with every SQL statement (``-vv``), the exact
    ``--log-level``; JSON lines with ``--log-format json`` (stderr itself then becomes
    :class:`JsonLines`)."""
    stream = _real_stderr()
    for name in ("benchledger", "alembic", "sqlalchemy.engine"):
        _detach(name)
    sys.stderr = stream
    level = settings.logging_level
    if level is None:
        return
    handler = _handler(settings, stream)
    if settings.json:
        handler.addFilter(_NoSqlParameters())
        sys.stderr = JsonLines(stream, handler.formatter or _formatter(settings))
    if level > logging.DEBUG:  # Alembic's plugin registry says hello at INFO on every run
        logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    for name, logger_level in _loggers(level).items():
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logger_level)
        logger.propagate = False


def configure_server_logging(settings: LogSettings, level: str) -> None:
    """Route uvicorn's loggers, its access log included, through the command's format on
    stderr at ``level``, every message scrubbed of credentials (the dashboard's token in
    an address). For ``serve``, which then runs uvicorn with ``log_config=None``."""
    _detach("uvicorn")
    handler = _handler(settings, _real_stderr())
    handler.addFilter(_Scrubbed())
    logger = logging.getLogger("uvicorn")
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
