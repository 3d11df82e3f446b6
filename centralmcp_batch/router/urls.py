"""URLs as the log and the errors may show them: a scheme and a host, never a user part, path, query or fragment.

A backend's URL may carry a password (``user:password@``), a token in its query (``?token=``) or its path. Text
is scrubbed in two passes. First the URLs the router was configured with (``register``), whose parts are
known: each of them, in every form it is printed in (as given, as the HTTP client normalizes it, escaped
as a string literal), becomes its scheme and host, and each secret part (user, password, query values,
fragment, a long path segment) is masked wherever else it shows. Then any other URL: from its scheme to
the next white space, parsed, not matched, and cut to its scheme and host. A password may hold ``'``,
``"`` or ``@``, which a pattern that stops at quotes or at the first ``@`` let through.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
from collections.abc import Iterable
from urllib.parse import quote, unquote, urlsplit

MASK = "***"
# A part shorter than this is not masked elsewhere in the text (it would mask common words); the URLs it is
# part of are still cut. A path segment is masked only from PATH_SECRET_CHARS (``/mcp`` is no secret).
MIN_SECRET_CHARS = 6
PATH_SECRET_CHARS = 16
# The characters a URL scheme is made of (RFC 3986), read backwards from ``://``.
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.")
# What separates the pieces of a URL's user part, path and query (and white space, which no URL holds).
_DELIMITERS = r"[:@/?#&=;,\s]+"
_OPENERS = {"'": "'", '"': '"', "(": ")", "<": ">", "[": "]", "`": "`"}

# form of a configured URL as it may be printed -> what it becomes; and the secret parts to mask
_forms: dict[str, str] = {}
_secrets: set[str] = set()


def register(url: str) -> None:
    """Know ``url`` (a configured backend's): its forms and secret parts are scrubbed from any text from now on."""
    origin = _origin(url)
    for form in _printed_forms(url):
        _forms.setdefault(form, origin)
    _secrets.update(part for part in _secret_parts(url) if len(part) >= MIN_SECRET_CHARS)


def hosts_only(text: str) -> str:
    """``text`` with every URL in it cut to its scheme and host, and the secret parts of known URLs masked."""
    text = known_urls_masked(text)
    return _cut_urls(text) if "://" in text else text


def known_urls_masked(text: str) -> str:
    """``text`` with the registered URLs cut to their scheme and host and their secret parts masked; any other
    URL kept whole (a backend's own error text may name a page to read, which is no secret of the router's)."""
    for form in sorted((form for form in _forms if form in text), key=len, reverse=True):
        text = text.replace(form, _forms[form])
    for secret in sorted((secret for secret in _secrets if secret in text), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def _cut_urls(text: str) -> str:
    pieces: list[str] = []
    done = 0
    at = text.find("://")
    while at != -1:
        start = at
        while start > done and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        if start == at:  # no scheme before it: not a URL
            at = text.find("://", at + 3)
            continue
        end = _url_end(text, at + 3)
        closer = _OPENERS.get(text[start - 1]) if start > 0 else None
        if closer is not None and end - 1 > at + 3 and text[end - 1] == closer:
            end -= 1  # the quote or bracket around the URL is not part of it
        pieces += [text[done:start], _origin(text[start:end])]
        done = end
        at = text.find("://", done)
    return "".join(pieces) + text[done:]


def _url_end(text: str, begin: int) -> int:
    """Where the URL whose rest starts at ``begin`` ends: at the next white space, or the end of the text."""
    for index in range(begin, len(text)):
        if text[index].isspace():
            return index
    return len(text)


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, parsed; the scheme alone when no host can be read."""
    scheme, _, _ = url.partition("://")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # an unreadable port, or brackets that do not close
        return f"{scheme}://"
    if ":" in host:  # an IPv6 address, in its brackets again
        host = f"[{host}]"
    return f"{scheme}://{host}" + (f":{port}" if port is not None else "")


def is_http_url(value: object) -> bool:
    """Whether ``value`` is an ``http``/``https`` URL whose host and port can be read as its clients read them.

    A ``#``, ``?`` or ``/`` left unescaped in a password ends the host part early (the password then reads
    as a port, or as the host): such a URL would reach another host, or none, and its errors quote pieces
    of the password.
    """
    if not isinstance(value, str) or not value.isprintable():
        return False
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - read for its check: ValueError when not a number
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def _printed_forms(url: str) -> set[str]:
    """``url`` as given, as the HTTP clients the SDKs use print it, and escaped inside a string literal."""
    forms = {url}
    for module in ("httpx", "httpx2"):  # SDK 1.x's HTTP client, and 2.x's
        try:
            forms.add(str(importlib.import_module(module).URL(url)))
        except Exception:  # not installed, or a URL it refuses (then it prints none of it either)
            continue
    for form in list(forms):
        forms.add(json.dumps(form)[1:-1])
        forms.add(repr(form)[1:-1])
    return {form for form in forms if "://" in form}


def _secret_parts(url: str) -> Iterable[str]:
    """The parts of ``url`` that may be secret, each as given, decoded and encoded, and so is each piece of them
    between a URL's delimiters (a reading that ends the password early leaves its pieces elsewhere)."""
    raw: list[str] = []
    hosts = set()
    for user, password, path, query, fragment, host in _readings(url):
        hosts.add(host)
        raw += [user, password, query, fragment]
        raw += [value for _, _, value in (pair.partition("=") for pair in query.split("&"))]
        raw += [segment for segment in path.split("/") if len(segment) >= PATH_SECRET_CHARS]
    pieces = {piece for part in raw for piece in re.split(_DELIMITERS, part)}
    found = set()
    for part in filter(None, {*raw, *pieces} - hosts):
        found |= {part, unquote(part), quote(unquote(part), safe=""), quote(unquote(part))}
    return found


def _readings(url: str) -> list[tuple[str, str, str, str, str, str]]:
    """``url``'s user, password, path, query, fragment and host as its clients read them, and, when that differs,
    as its author may have meant them: a ``/``, ``?``, ``#`` or bracket left unescaped in a password ends
    the clients' user part early (or makes the URL unreadable), where the author's runs to the last ``@``."""
    rest = url.partition("://")[2]
    userinfo, _, after = rest.rpartition("@")
    user, _, password = userinfo.partition(":")
    after, _, fragment = after.partition("#")
    after, _, query = after.partition("?")
    host, slash, path = after.partition("/")
    meant = (user, password, slash + path, query, fragment, host.rpartition(":")[0] or host)
    try:
        parts = urlsplit(url)
        read = (
            parts.username or "",
            parts.password or "",
            parts.path,
            parts.query,
            parts.fragment,
            parts.hostname or "",
        )
    except ValueError:
        return [meant]
    return [read] if parts.netloc.rpartition("@")[2] == host else [read, meant]


class UrlHostsOnly(logging.Filter):
    """A record's URLs cut to their scheme and host, in its message and in its traceback (``hosts_only``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a call whose arguments do not fit its format: logging reports it itself
            return True
        record.msg, record.args = hosts_only(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = hosts_only(record.exc_text)  # what the handlers print in place of formatting it
        if record.stack_info:
            record.stack_info = hosts_only(record.stack_info)
        return True


def hide_urls_in_logs(logger: logging.Logger | None = None) -> None:
    """Install ``UrlHostsOnly`` on every handler of ``logger`` (the root logger's by default), once each.

    On the handlers, not on loggers: a logger's filter sees only the records logged to that logger itself,
    and the URLs come from many (the SDKs' own, their HTTP clients', the router's), at every level.
    """
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(each, UrlHostsOnly) for each in handler.filters):
            handler.addFilter(UrlHostsOnly())
