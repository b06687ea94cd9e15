"""Kafka's `sasl.jaas.config` value: one JAAS login module entry, parsed as Kafka parses it.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

Kafka (JaasConfig) reads it with java.io.StreamTokenizer: `//` and `/* */` comments, words of
letters, digits, `.`, `-`, `_`, `$`, values quoted with `"` or `'` (Java escapes inside), the
control flag (required, requisite, sufficient, optional; any case), options `key=value`, and
the entry ends with `;`. A `sasl.jaas.config` property holds exactly one entry. An unquoted
value that starts like a number (StreamTokenizer reads it as one) is refused, as Kafka does
("Value not specified for key"). Errors never include option values (passwords).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["JaasEntry", "JaasError", "parse_jaas"]

_FLAGS = ("REQUIRED", "REQUISITE", "SUFFICIENT", "OPTIONAL")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


class JaasError(ValueError):
    pass


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    control_flag: str
    options: dict[str, str] = field(repr=False)  # may hold passwords


def _is_word_start(c: str) -> bool:
    return c.isalpha() or c in "_$" or "\u00a0" <= c <= "\u00ff"


def _is_word_char(c: str) -> bool:
    return _is_word_start(c) or c.isdigit() or c in ".-"


# A token: (kind, text): kind "word", "quoted", "number", or the ordinary character itself.
def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c <= " ":
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c in "\"'":
            i += 1
            buf = []
            while i < n and text[i] != c and text[i] not in "\r\n":
                ch = text[i]
                if ch == "\\" and i + 1 < n:
                    nxt = text[i + 1]
                    if nxt in "01234567":
                        j = i + 1
                        while j < n and j < i + 4 and text[j] in "01234567":
                            j += 1
                        buf.append(chr(int(text[i + 1 : j], 8) & 0xFF))
                        i = j
                        continue
                    buf.append(_ESCAPES.get(nxt, nxt))
                    i += 2
                    continue
                buf.append(ch)
                i += 1
            if i < n and text[i] == c:
                i += 1
            out.append(("quoted", "".join(buf)))
        elif c.isdigit() or c == "." or (c == "-" and i + 1 < n and (text[i + 1].isdigit() or text[i + 1] == ".")):
            j = i + 1
            while j < n and (text[j].isdigit() or text[j] == "."):
                j += 1
            out.append(("number", text[i:j]))
            i = j
        elif _is_word_start(c) or c == "-":
            j = i + 1
            while j < n and _is_word_char(text[j]):
                j += 1
            out.append(("word", text[i:j]))
            i = j
        else:
            out.append((c, c))
            i += 1
    return out


def parse_jaas(text: str) -> JaasEntry:
    """The one login module entry of a `sasl.jaas.config` value (JaasError says what is wrong)."""
    tokens = _tokens(text)
    entries: list[JaasEntry] = []
    i = 0

    def value_at(k: int) -> str | None:
        return tokens[k][1] if k < len(tokens) and tokens[k][0] in ("word", "quoted") else None

    while i < len(tokens):
        module = value_at(i)
        if module is None:
            raise JaasError("JAAS config entry does not start with a login module class name")
        i += 1
        flag = value_at(i)
        if flag is None:
            raise JaasError("Login module control flag not specified in JAAS config")
        if flag.upper() not in _FLAGS:
            raise JaasError(f"Invalid login module control flag '{flag}' in JAAS config")
        i += 1
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            key = value_at(i)
            if key is None:
                raise JaasError("JAAS config option name expected")
            if i + 1 >= len(tokens) or tokens[i + 1][0] != "=" or value_at(i + 2) is None:
                raise JaasError(f"Value not specified for key '{key}' in JAAS config")
            options[key] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasError("JAAS config entry not terminated by semi-colon")
        i += 1
        entries.append(JaasEntry(module, flag.lower(), options))
    if not entries:
        raise JaasError("Login module not specified in JAAS config")
    if len(entries) != 1:
        raise JaasError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]
