"""Redis URLs and TLS options: what :func:`signals.streams.client.connect` accepts.

A URL redis-py would refuse, or an option that would silently weaken TLS verification, is
:class:`~signals.errors.InvalidInputError` before any connection; TLS files are checked
up front and named when unusable; :func:`redact_url` is how messages show a URL.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from signals.errors import InvalidInputError

__all__ = ("TLSOptions", "check_url", "redact_url")


@dataclass(frozen=True, slots=True)
class TLSOptions:
    """TLS for a ``rediss://`` connection (see :func:`connect`); the only way to set it.

    The server's certificate is always verified (chain and host name) unless
    ``insecure_skip_verify`` is set; URL query options such as ``ssl_cert_reqs=none`` are
    refused, so verification cannot be turned off by a URL copied from somewhere.

    Attributes:
        ca_file: PEM file of the CA certificate(s) the server's certificate must chain
            to; ``None``: the system's trust store.
        cert_file: PEM client certificate, for servers that authenticate clients
            (``tls-auth-clients yes``).
        key_file: PEM private key of ``cert_file`` (unencrypted); ``None``: the key is in
            ``cert_file``.
        insecure_skip_verify: do not verify the server at all. Anyone on the network path
            can then impersonate Redis and read or forge every signal: for a test bench
            only.
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure_skip_verify: bool = False

    def check(self) -> None:
        """Refuse missing, unreadable or malformed files, naming the file.

        Raises:
            InvalidInputError: a file cannot be read, the CA file holds no certificate,
                or the client certificate and key do not load as a pair.
        """
        if self.key_file and not self.cert_file:
            raise InvalidInputError("a TLS client key needs its client certificate (cert_file)")
        for what, path in (("CA file", self.ca_file), ("client certificate", self.cert_file),
                           ("client key", self.key_file)):
            if path is not None:
                _check_readable(path, f"TLS {what}")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.ca_file:
            try:
                context.load_verify_locations(cafile=self.ca_file)
            except (ssl.SSLError, ValueError) as e:
                raise InvalidInputError(f"TLS CA file {self.ca_file}: no PEM certificate in it ({e})") from e
        if self.cert_file:
            try:  # an empty password: an encrypted key fails here instead of prompting on the tty
                context.load_cert_chain(self.cert_file, self.key_file, password=b"")
            except (ssl.SSLError, ValueError) as e:
                names = self.cert_file + (f" and key {self.key_file}" if self.key_file else "")
                raise InvalidInputError(f"TLS client certificate {names}: not a PEM certificate with its "
                                        f"unencrypted private key ({e})") from e

    def redis_options(self) -> dict[str, object]:
        """The redis-py ``ssl_*`` keyword arguments."""
        options: dict[str, object] = {"ssl_ca_certs": self.ca_file, "ssl_certfile": self.cert_file,
                                      "ssl_keyfile": self.key_file}
        if self.insecure_skip_verify:
            options.update(ssl_cert_reqs="none", ssl_check_hostname=False)
        else:
            options.update(ssl_cert_reqs="required", ssl_check_hostname=True)
        return options


def _check_readable(path: str, what: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise InvalidInputError(f"{what} {path}: {e.strerror or e}") from e


_SCHEMES = ("redis", "rediss", "unix")
#: URL query options that would override (or weaken) the TLS options, and what to use instead.
_SKIP_VERIFY = "the tls_insecure_skip_verify setting (--tls-insecure-skip-verify; TLSOptions.insecure_skip_verify)"
_TLS_SETTING = {
    "ssl_cert_reqs": _SKIP_VERIFY,
    "ssl_check_hostname": _SKIP_VERIFY,
    "ssl_exclude_verify_flags": _SKIP_VERIFY,
    "ssl_ca_certs": "the tls_ca_file setting (--tls-ca; TLSOptions.ca_file)",
    "ssl_ca_path": "the tls_ca_file setting (--tls-ca; TLSOptions.ca_file)",
    "ssl_ca_data": "the tls_ca_file setting (--tls-ca; TLSOptions.ca_file)",
    "ssl_certfile": "the tls_cert_file setting (--tls-cert; TLSOptions.cert_file)",
    "ssl_keyfile": "the tls_key_file setting (--tls-key; TLSOptions.key_file)",
}


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)
        user = netloc[0].split(":", 1)[0]
        return parts._replace(netloc=f"{user}:***@{netloc[1]}").geturl()
    except ValueError:
        return "<unparsable URL>"


#: The URL query options a Redis URL may carry (redis-py's, but TLS's and those that would
#: change the replies this package reads: an unknown one became a keyword argument of every
#: connection, and ``protocol=3`` reshaped the replies the worker parses).
_URL_OPTIONS = frozenset({"db", "socket_timeout", "socket_connect_timeout", "socket_read_size", "socket_keepalive",
                          "retry_on_timeout", "max_connections", "health_check_interval", "timeout", "protocol",
                          "client_name"})


def check_url(url: object, tls: TLSOptions | None) -> str:
    """Refuse a URL redis-py would refuse at its first command, or one that overrides TLS."""
    if not isinstance(url, str):
        raise InvalidInputError(f"the Redis URL must be a string, not {type(url).__name__}")
    try:
        url.encode("utf-8")
        parts = urlsplit(url)
        query = parse_qs(parts.query, keep_blank_values=True)
    except (UnicodeEncodeError, ValueError) as e:
        raise InvalidInputError(f"Redis URL {redact_url(url)!r} is malformed: {e}") from e
    shown = redact_url(url)
    if "://" not in url or parts.scheme not in _SCHEMES:
        scheme = f"scheme {parts.scheme!r}" if "://" in url else "no scheme"
        raise InvalidInputError(f"Redis URL {shown!r} has {scheme}: it must start with redis://, rediss:// "
                                "(TLS) or unix://")
    for name, values in query.items():
        if name.lower().startswith("ssl"):
            instead = _TLS_SETTING.get(name.lower(), "the tls_* settings (TLSOptions)")
            raise InvalidInputError(f"Redis URL option {name!r} is refused: TLS is configured only through the "
                                    f"TLS settings, which it would silently override; use {instead} instead")
        if name == "protocol" and values != ["2"]:
            raise InvalidInputError(f"Redis URL option protocol={','.join(values)[:20]!r} is refused: wm-signals "
                                    "speaks RESP2 (protocol=2), whose replies it reads; leave the option out")
        if name not in _URL_OPTIONS:
            raise InvalidInputError(f"Redis URL option {name[:40]!r} is not one wm-signals passes on (redis-py "
                                    f"would take it as a connection argument); the options are "
                                    f"{', '.join(sorted(_URL_OPTIONS))}")
        _check_option(name, values[-1] if values else "")
    _check_database(parts.path, query, shown)
    if tls is not None and parts.scheme != "rediss":
        raise InvalidInputError(f"TLS settings need a rediss:// Redis URL, not {parts.scheme}://")
    return parts.scheme


#: URL options whose value is a number of seconds above 0 (0 would be "time out at once"
#: to asyncio, and redis-py then reported the server as unreachable).
_POSITIVE_SECONDS = ("socket_timeout", "socket_connect_timeout", "timeout")
#: URL options whose value is a whole number (0 allowed: off).
_COUNTS = {"health_check_interval": 0, "socket_read_size": 1, "max_connections": 1}
_CLIENT_NAME = re.compile(r"[!-~]{1,128}")


def _check_option(name: str, value: str) -> None:
    """Refuse a URL option value redis-py would take and then fail on, naming the option."""
    if name in _POSITIVE_SECONDS:
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not 0 < seconds < float("inf"):  # NaN fails both
            raise InvalidInputError(f"Redis URL option {name}={value[:20]!r} is not a number of seconds above 0 "
                                    "(leave the option out for no timeout)")
    elif name in _COUNTS:
        if not value.isdigit() or int(value) < _COUNTS[name]:
            raise InvalidInputError(f"Redis URL option {name}={value[:20]!r} is not a whole number of at least "
                                    f"{_COUNTS[name]}")
    elif name == "client_name" and not _CLIENT_NAME.fullmatch(value):
        raise InvalidInputError(f"Redis URL option client_name={value[:40]!r}: a client name is 1 to 128 printable "
                                "characters without spaces (Redis refuses any other)")


def _check_database(path: str, query: dict[str, list[str]], shown: str) -> None:
    """Refuse a database that is not a number (``/x``); one past the server's ``databases``
    is refused by the server at connect, and named then (see :class:`signals.streams.redis_compat._BusyErrors`)."""
    for where, value in (("path", path.lstrip("/")), ("option db", (query.get("db") or [""])[-1])):
        if value and not (value.isdigit() and len(value) <= 10):
            raise InvalidInputError(f"Redis URL {shown!r}: the database ({where}) is {value[:20]!r}, not a "
                                    "database number")


