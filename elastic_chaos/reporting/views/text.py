"""What a script printed, made safe to show: control characters and bidirectional overrides, visible.

A report quotes a job's own lines (log excerpts, the tails of a job that ended early, a regex's match).
A script can print anything: ESC sequences that rewrite a terminal, BEL, backspaces that hide what
came before, NUL, and Unicode's bidirectional overrides (U+202E turns ``txt.exe`` around): copied
verbatim, they make a report say something other than what the log holds. ``visible`` shows each as
an escape (``\\x1b``, ``\\u202e``); tabs and newlines stay. Every rendering (report.html, summary.md,
the CLI's text) passes its text through it; HTML escaping comes after, as before.
"""
from __future__ import annotations

import html
import re

_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
"""C0/C1 controls but tab and newline, DEL, zero-width and directional marks, embeddings, overrides and isolates."""


def visible(text: str) -> str:
    """``text`` with every control and bidirectional character shown as its escape."""
    return _HIDDEN.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    code = ord(m[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` for HTML: its control and bidirectional characters shown, then HTML-escaped."""
    return html.escape(visible(text))
