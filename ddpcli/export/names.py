"""Names from records, made safe as one path component (a TensorBoard folder) or an id (W&B, an MLflow tag).

A record's name and run_id are untrusted text (a hand-edited run.json may hold `/`, `..`, a NUL): each character
outside a small safe set is written as `%XX` of its UTF-8 bytes, `%` included, so the mapping is one to one and
reversible (`decoded`), and the result is never empty, `.` or `..`. A name too long for a file system is cut and
ends with a hash of the whole, still distinct.
"""

from __future__ import annotations

import hashlib
import string
from urllib.parse import unquote

SAFE = frozenset(string.ascii_letters + string.digits + "-_.+=@,")
MAX_BYTES = 200  # file systems allow 255 bytes a component; room for a temp prefix


def component(name: str) -> str:
    """`name` as one path component: safe characters as they are, every other byte as %XX."""
    encoded = "".join(char if char in SAFE else _escaped(char) for char in name)
    if encoded in ("", ".", ".."):
        encoded = "".join(f"%{ord(char):02X}" for char in encoded) or "%"
    if len(encoded) > MAX_BYTES:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        encoded = f"{encoded[: MAX_BYTES - 17]}~{digest}"
    return encoded


def decoded(encoded: str) -> str:
    """The name a component() spelled (for one that was not cut to length); a lone `%` is the empty name."""
    return "" if encoded == "%" else unquote(encoded, errors="surrogatepass")


def _escaped(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
