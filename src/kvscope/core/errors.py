"""Errors that map to exit codes: InputError is the user's problem (exit 2), anything else is ours (exit 1)."""


class InputError(Exception):
    """Bad input or usage: reported as one line on stderr, exit code 2."""


# ``kvscope watch``: a failed request to a server. Here, below the engines, because each engine's
# watch adapter raises and catches them; the HTTP client itself lives in kvscope.watch.http.
class WatchError(Exception):
    """A failed request: ``message`` is for people, ``retry`` says whether waiting can help."""

    retry = True
    kind = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unreachable(WatchError):
    kind = "unreachable"


class TimedOut(WatchError):
    kind = "timeout"


class ServerError(WatchError):
    kind = "server-error"


class NotFound(WatchError):
    kind = "not-found"
    retry = False


class AuthFailed(WatchError):
    kind = "auth"
    retry = False


class TLSFailed(WatchError):
    kind = "tls"
    retry = False


class ClientError(WatchError):
    kind = "client-error"
    retry = False


class Malformed(WatchError):
    """The server answered, but not with what that endpoint serves (HTML error page, cut body)."""

    kind = "malformed"
