"""Griffe extension: the code's reStructuredText habits, rendered right in the Markdown API page.

mkdocstrings renders docstrings as Markdown. Two things the docstrings here write in the
Sphinx way would come out wrong, so each docstring is rewritten as it is loaded:

- cross-reference roles (:class:`~cory_env.CollectiveRewardWrapper`, :func:`load_tokenizer`)
  become optional autorefs links: a link when the target is rendered somewhere in the site,
  plain code otherwise. Names without a dot are resolved in the docstring's own scope (its
  class, then its module), as Sphinx does;
- doctest blocks (``>>>`` lines and their output) become fenced ``pycon`` code blocks, without
  ``# doctest:`` flags (Markdown would read ``>>>`` as nested quotes);
- ``#:`` comments above an attribute (Sphinx's attribute docstrings) become its docstring, so
  constants such as ``SENTIMENT_OBSERVER`` and ``PRESETS`` are documented.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|obj|exc|const):`(~?)([\w.]+)(?:\(\))?`")
DOCTEST_FLAGS = re.compile(r"\s*#\s*doctest:.*$")


class SphinxDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is None and obj.is_attribute:
            obj.docstring = comment_docstring(obj)
        if obj.docstring is None:
            return
        text = obj.docstring.value
        if ":`" in text:
            text = ROLE.sub(lambda m: _autoref(obj, short=bool(m[1]), name=m[2]), text)
        if ">>>" in text:
            text = fence_doctests(text)
        obj.docstring.value = text


def _autoref(obj: griffe.Object, *, short: bool, name: str) -> str:
    identifier = name
    if "." not in name:
        try:
            identifier = obj.resolve(name)
        except Exception:  # not in scope (e.g. a name from another package): keep it as plain code
            identifier = name
    title = name.rsplit(".", 1)[-1] if short else name
    return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'


def comment_docstring(attr: griffe.Object) -> griffe.Docstring | None:
    """The ``#:`` comment lines right above an attribute's definition, as its docstring."""
    try:
        lines = attr.lines_collection[attr.filepath]
    except (KeyError, ValueError):  # no source (e.g. a compiled module)
        return None
    if not attr.lineno:
        return None
    comment: list[str] = []
    i = attr.lineno - 2  # the line above the definition, 0-based
    while i >= 0 and lines[i].lstrip().startswith("#:"):
        comment.insert(0, lines[i].lstrip()[2:].strip())
        i -= 1
    if not comment:
        return None
    return griffe.Docstring("\n".join(comment), lineno=i + 2, endlineno=attr.lineno - 1, parent=attr)


def fence_doctests(text: str) -> str:
    """Wrap each run of doctest lines (from a ``>>>`` line to the next blank line) in a code fence."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        stripped = lines[i].lstrip()
        if not stripped.startswith(">>>"):
            out.append(lines[i])
            i += 1
            continue
        indent = lines[i][: len(lines[i]) - len(stripped)]
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(DOCTEST_FLAGS.sub("", lines[i]))
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)
