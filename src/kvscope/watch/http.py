"""One GET against the server, with every way it can fail turned into a message a person can act on.

Standard library only (urllib): watch must not add dependencies to kvscope. Every failure becomes a
:class:`WatchError` whose ``retry`` says whether waiting can help (a server still loading, a
restart, a 503) or not (a refused API key, an untrusted certificate): the loop retries the first
kind with backoff and stops at once on the second, so nothing hangs and no traceback escapes.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from kvscope.core.errors import (
    AuthFailed,
    ClientError,
    InputError,
    Malformed,
    NotFound,
    ServerError,
    TimedOut,
    TLSFailed,
    Unreachable,
    WatchError,
)

MAX_BODY_BYTES = 64 << 20  # a /metrics page of a large DP deployment is a few MB; more is not metrics
_CHUNK = 1 << 16


@dataclass(slots=True)
class Response:
    status: int
    body: bytes
    content_type: str
    elapsed_s: float

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def normalise_url(url: str) -> str:
    """``host:port`` or ``http(s)://host:port[/prefix]`` → base URL without a trailing slash."""
    url = url.strip()
    if not url:
        raise InputError("give the server's URL, e.g. http://127.0.0.1:8000")
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise InputError(f"{url}: only http:// and https:// URLs can be watched")
    try:
        port = parts.port
    except ValueError:
        raise InputError(f"{url}: the port is not a number between 0 and 65535") from None
    if not parts.hostname:
        raise InputError(f"{url}: no host name in the URL")
    del port
    path = parts.path.rstrip("/")
    for suffix in ("/metrics", "/v1"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def display_url(url: str) -> str:
    """The URL without user:password, safe to print and record."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def is_loopback(url: str) -> bool:
    """True when the server runs on this machine (so its GPUs are this machine's GPUs)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port): what must stay the same for credentials to follow a redirect."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port


class _Elsewhere(Exception):
    """A redirect to another origin while credentials are set: not followed (they would go with it)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect within the server's origin; to another origin only when no credentials are set, and then
    with no Authorization header either (urllib copies every header to the new request, the API key included)."""

    def __init__(self, credentials: bool) -> None:
        self.credentials = credentials

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        if origin(newurl) != origin(req.full_url):
            if self.credentials:
                raise _Elsewhere(newurl)
            new = super().redirect_request(req, fp, code, msg, headers, newurl)
            if new is not None:
                new.remove_header("Authorization")
            return new
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _reason_text(reason: object) -> str:
    text = str(getattr(reason, "strerror", None) or reason)
    return text[:200]


class Client:
    """GETs under one base URL with one API key, timeout and TLS policy."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 10.0,
        insecure: bool = False,
        max_bytes: int = MAX_BODY_BYTES,
        basic_auth: tuple[str, str] | None = None,
        ca_file: str | None = None,
        key_option: str = "--api-key KEY (or set KVSCOPE_API_KEY)",
        key_name: str = "API key",
    ) -> None:
        given = normalise_url(base_url)
        parts = urllib.parse.urlsplit(given)
        # user:password@ in the URL: sent as HTTP Basic (urllib cannot connect to such a netloc), never shown
        userinfo = (urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or ""))
        self.base = display_url(given)
        self.shown = self.base
        self.api_key = api_key
        if basic_auth is None and parts.username is not None:
            basic_auth = userinfo
        self._basic = base64.b64encode(f"{basic_auth[0]}:{basic_auth[1]}".encode()).decode() if basic_auth else None
        self.key_option, self.key_name = key_option, key_name
        self.timeout = timeout
        self.max_bytes = max_bytes
        handlers: list[urllib.request.BaseHandler] = [_SameOriginRedirects(bool(api_key or self._basic))]
        if is_loopback(self.base):
            handlers.append(urllib.request.ProxyHandler({}))  # a proxy never reaches our loopback
        if self.base.startswith("https://"):
            try:
                ctx = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise InputError(f"{ca_file}: not a readable CA certificate file ({_reason_text(exc)})") from None
            if insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            handlers.append(urllib.request.HTTPSHandler(context=ctx))
        self._opener = urllib.request.build_opener(*handlers)
        parts = urllib.parse.urlsplit(self.base)
        self._host = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"

    def get(self, path: str) -> Response:
        """GET base+path; a :class:`WatchError` for anything but a complete 2xx answer within ``timeout`` seconds.

        The whole request (connect, headers, body) is bounded, not each read: a server that trickles a byte
        every few seconds never trips a per-read timeout. It runs in a daemon thread; when the deadline passes
        the thread is abandoned (its socket times out on its own) and the watch goes on."""
        box: list[Response | BaseException] = []

        def run() -> None:
            try:
                box.append(self._get(path))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as it is
                box.append(exc)

        worker = threading.Thread(target=run, name="kvscope-watch-get", daemon=True)
        worker.start()
        worker.join(self.timeout + 0.5)  # the socket's own timeout fires first where the server is merely slow
        if not box:
            raise TimedOut(f"{self.shown}{path}: no complete answer within {self.timeout:g} s (server stuck, or "
                           "trickling its answer)")
        result = box[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def _get(self, path: str) -> Response:
        url = self.base + path
        headers = {"User-Agent": "kvscope-watch", "Accept": "*/*"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        elif self._basic:
            headers["Authorization"] = f"Basic {self._basic}"
        request = urllib.request.Request(url, headers=headers, method="GET")
        start = time.monotonic()
        try:
            with self._opener.open(request, timeout=self.timeout) as resp:
                body = self._read(resp, start, path)
                return Response(resp.status, body, resp.headers.get("Content-Type", ""), time.monotonic() - start)
        except _Elsewhere as exc:
            raise ClientError(f"{self.shown}{path}: the server redirects to {display_url(exc.url)}, another host or "
                              "port; not followed, so your credentials are not sent there (watch that URL "
                              "directly if you trust it)") from None
        except urllib.error.HTTPError as exc:
            raise self._status_error(exc.code, path, exc) from None
        except urllib.error.URLError as exc:
            raise self._url_error(exc.reason, path) from None
        except TimeoutError:
            raise TimedOut(f"{self.shown}{path}: no answer within {self.timeout:g} s (server busy or stuck)") from None
        except ssl.SSLError as exc:
            raise self._tls_error(exc) from None
        except (http.client.RemoteDisconnected, http.client.BadStatusLine, ConnectionResetError):
            raise Unreachable(
                f"{self.shown}{path}: the server closed the connection without an HTTP answer"
                + (" (if it serves TLS, use https://)" if self.base.startswith("http://") else "")
            ) from None
        except http.client.IncompleteRead:
            raise Malformed(f"{self.shown}{path}: the answer was cut off mid-body") from None
        except (http.client.HTTPException, OSError, ValueError) as exc:
            raise Unreachable(f"{self.shown}{path}: {type(exc).__name__}: {_reason_text(exc)}") from None

    def get_json(self, path: str) -> Any:
        resp = self.get(path)
        try:
            return json.loads(resp.body)
        except (ValueError, UnicodeDecodeError):
            raise Malformed(f"{self.shown}{path}: the answer is not JSON ({_peek(resp.body)})") from None
        except RecursionError:
            raise Malformed(f"{self.shown}{path}: the answer nests deeper than any server's JSON") from None

    def _read(self, resp: Any, start: float, path: str) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = resp.read1(_CHUNK)  # what has arrived, not a full chunk: the deadline is checked as it trickles
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_bytes:
                raise Malformed(f"{self.shown}{path}: answer larger than {self.max_bytes >> 20} MiB, not read")
            if time.monotonic() - start > self.timeout:
                raise TimedOut(f"{self.shown}{path}: answer still trickling in after {self.timeout:g} s")
            chunks.append(chunk)

    def _status_error(self, code: int, path: str, exc: urllib.error.HTTPError) -> WatchError:
        try:
            detail = _peek(exc.read(2048))
        except (OSError, http.client.HTTPException):
            detail = ""
        where = f"{self.shown}{path}"
        if code in (401, 403):
            if self.api_key:
                return AuthFailed(f"{where}: HTTP {code}: the server refused the {self.key_name} given with "
                                  f"{self.key_option.split()[0]}")
            if self._basic:
                return AuthFailed(f"{where}: HTTP {code}: the server refused the user name and password")
            return AuthFailed(f"{where}: HTTP {code}: the server wants {'an' if self.key_name[0] in 'AEIOU' else 'a'} {self.key_name}; pass {self.key_option}")
        if code == 404:
            return NotFound(f"{where}: HTTP 404 (this server has no such endpoint)")
        if code >= 500:
            return ServerError(f"{where}: HTTP {code} from the server{': ' + detail if detail else ''}")
        if code == 429:
            return ServerError(f"{where}: HTTP 429 (rate limited)")
        return ClientError(f"{where}: HTTP {code}{': ' + detail if detail else ''}")

    def _url_error(self, reason: object, path: str) -> WatchError:
        where = f"{self.shown}{path}"
        if isinstance(reason, ssl.SSLError):
            return self._tls_error(reason)
        if isinstance(reason, ConnectionRefusedError):
            return Unreachable(f"{where}: connection refused: nothing listens on {self._host} "
                               "(server not up yet, or stopped)")
        if isinstance(reason, socket.gaierror):
            return Unreachable(f"{where}: cannot resolve the host name ({_reason_text(reason)})")
        if isinstance(reason, TimeoutError):
            return TimedOut(f"{where}: no answer within {self.timeout:g} s (server busy or stuck)")
        return Unreachable(f"{where}: {_reason_text(reason)}")

    def _tls_error(self, exc: ssl.SSLError) -> WatchError:
        if isinstance(exc, ssl.SSLCertVerificationError):
            why = getattr(exc, "verify_message", None) or _reason_text(exc)
            return TLSFailed(f"{self.shown}: TLS certificate not trusted ({why}); "
                             "pass --insecure to skip verification, or use a certificate this machine trusts")
        text = _reason_text(exc)
        if "WRONG_VERSION_NUMBER" in text or "wrong version number" in text or "record layer" in text:
            return TLSFailed(f"{self.shown}: the server does not speak TLS on {self._host}; use http://")
        return TLSFailed(f"{self.shown}: TLS handshake failed ({text})")


def _peek(body: bytes) -> str:
    text = body[:160].decode("utf-8", errors="replace").strip().replace("\n", " ")
    return text if text else "empty body"
