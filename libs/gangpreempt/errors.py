"""The one error tree of gangpreempt.

::

    GangpreemptError
     +-- InvalidInput        bad data from outside: names the object and the field.
     |    +-- ManifestError  a manifest file: file, document, object, field path, line.
     +-- Transient           worth retrying later (a bus nak with delay).
     +-- Conflict            a compare-and-set was lost: re-read, retry or step down.
     +-- Fenced              a stale lease holder: stop writing.

Errors are classified once, at the edge that meets them; the core raises
``InvalidInput`` (or a subclass) and nothing else on bad data.
"""

from __future__ import annotations


class GangpreemptError(Exception):
    """Root of every error gangpreempt raises on purpose."""


class InvalidInput(GangpreemptError):
    """Input that can never succeed as given; the message names object and field."""


class ManifestError(InvalidInput):
    """A manifest that cannot be read, located precisely.

    Rendered as ``FILE: document N (Kind ns/name): field.path: message (line L)``.
    """

    def __init__(
        self,
        file: str,
        message: str,
        *,
        document: int | None = None,
        obj: str | None = None,
        field: str | None = None,
        line: int | None = None,
    ) -> None:
        self.file = file
        self.document = document
        self.obj = obj
        self.field = field
        self.line = line
        self.message = message
        super().__init__(self.render())

    def render(self) -> str:
        parts = [self.file]
        if self.document is not None:
            where = f"document {self.document}"
            if self.obj:
                where += f" ({self.obj})"
            parts.append(where)
        elif self.obj:
            parts.append(self.obj)
        if self.field:
            parts.append(self.field)
        text = ": ".join(parts) + f": {self.message}"
        if self.line is not None:
            text += f" (line {self.line})"
        return text


class Transient(GangpreemptError):
    """A failure that may succeed when retried later."""


class Conflict(GangpreemptError):
    """A compare-and-set lost to another writer."""


class Fenced(GangpreemptError):
    """This process no longer holds the lease it writes under."""


EXIT_INVALID = 2  # the exit status of a command or service stopped by invalid input


__all__ = [
    "EXIT_INVALID",
    "Conflict",
    "Fenced",
    "GangpreemptError",
    "InvalidInput",
    "ManifestError",
    "Transient",
]
