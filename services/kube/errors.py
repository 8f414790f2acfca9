"""The API server's errors, apart from the client (which imports kubernetes_asyncio and
aiohttp): a service that never talks to an API server catches them without paying for
those imports at start."""

from __future__ import annotations


class ApiError(Exception):
    """A non-2xx answer of the API server, with its HTTP status and Status reason."""

    def __init__(
        self, status: int, reason: str, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @property
    def retriable(self) -> bool:
        """409 Conflict (re-read first), 429 Too Many Requests and 5xx may succeed later;
        409 AlreadyExists will not."""
        if self.status == 409:
            return self.reason != "AlreadyExists"
        return self.status == 429 or self.status >= 500


__all__ = ["ApiError"]
