"""What every command prints: log lines on stderr, and no credential in any of them or in a traceback.

A store URI may carry a user and password (`http://user:pass@host`, `postgresql://user:pass@db/x`); MLflow and the
libraries under it put the URI into their messages and exceptions. `redact` is the one function that takes them out;
`configure` (called by every stage command's prologue, config.stage_config) applies it to every log record and to
the traceback of an exception nobody caught. Standard library only.
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from types import TracebackType

_CREDENTIALS = re.compile(r"(//)[^/@\s]+@")  # user:password@ in a URI
FORMAT = "%(levelname)s %(name)s: %(message)s"


def redact(text: str) -> str:
    """Drop credentials embedded in URIs (`scheme://user:pass@host` -> `scheme://***@host`)."""
    return _CREDENTIALS.sub(r"\1***@", text)


class Redacting(logging.Formatter):
    """A formatter whose every line, the exception text of a record included, has its credentials redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def _excepthook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    sys.stderr.write(redact("".join(traceback.format_exception(kind, error, trace))))


def configure(level: int = logging.INFO) -> None:
    """Log to stderr at `level` through the redacting formatter (every handler the root logger has), and print the
    traceback of an uncaught exception redacted."""
    logging.basicConfig(level=level, format=FORMAT)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(Redacting(handler.formatter._fmt if handler.formatter else FORMAT))
    sys.excepthook = _excepthook
