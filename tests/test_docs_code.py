"""The Python blocks of the documentation run as written, so a stale default or a renamed symbol fails here.

The collector (:func:`fenced_blocks`) reads a Markdown page's fenced code blocks; those whose language is
``python`` (```` ```python ````, also with attributes: ```` ```python title="x.py" ````) are the page's
Python blocks; a ```` ```bash ```` block or an indented block is not, and an unclosed fence is an error. The
blocks of one page run in order in one fresh module namespace (a later block may use what an earlier one
defined, as a reader running the page would), in a fresh working directory (``tmp_path``), with
``HF_HUB_OFFLINE=1``: each page is a test case of its own, and a failure names the page, the line of the
block's opening fence and the exception, with a traceback whose line numbers are the page's. A block's
``sys.exit(0)`` ends that block only; any other exit status fails.

A block that must not run is marked by an HTML comment on the line just before its fence (it is not
rendered): ``<!-- not run: REASON -->``. Only those are skipped, and a mark without a reason fails.
Prefer a block that is cheap and runs as written (the embedded model, the tiny one, the toy tokenizer).

To run a page's blocks: add it to :data:`PAGES` and its number of Python blocks to :data:`BLOCKS` (the
count test says how many it found). A page may register learners: after each page the learner registry
(``LEARNERS``) and the package loggers are put back as they were (:func:`restored_state`).

tests/test_docs.py::test_index_examples_run runs docs/index.md's examples (slow: they train).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import traceback
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.distributions import declare_distribution

DOCS = ROOT / "docs"

#: The pages (under docs/) whose Python blocks the tests run, one test case each.
PAGES = ["quickstart.md", "games.md", "multi-agent-algorithms.md", "plug-in-your-algorithm.md"]

#: The Python blocks each page holds (those marked not run included): a page that loses a block, or a
#: fence typo (```pyhton, an unclosed fence), changes its count.
BLOCKS = {"quickstart.md": 2, "games.md": 2, "multi-agent-algorithms.md": 0, "plug-in-your-algorithm.md": 8}

#: What a page has its reader ``pip install`` before its blocks: packages made importable and their entry points
#: declared, as pip would (:func:`as_installed`).
INSTALLED = {"plug-in-your-algorithm.md": [ROOT / "examples" / "plugins" / "magrpo"]}

#: Other names of Python a fence might use: such a block would silently not run, so a page may not use them.
PYTHON_ALIASES = {"py", "py3", "python3", "pycon", "ipython", "python-repl"}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>.*?)[ \t]*$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not[ -]run\b:?\s*(?P<reason>.*?)\s*-->\s*$", re.I)
_LOGGERS = ("cory_agents", "cory_env")


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page."""

    line: int  #: the line of its opening fence in the page, from 1
    language: str  #: the first word of the fence's info string ("" for none)
    code: str  #: its text, without the fence's indentation
    not_run: str | None = None  #: the reason of a ``<!-- not run: REASON -->`` just before it ("" if none)


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced code block of the Markdown ``text``, in order (CommonMark's fences: three or more backticks
    or tildes, closed by a line of at least as many of the same character). An unclosed fence raises."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening or (opening["fence"][0] == "`" and "`" in opening["info"]):  # inline code, not a fence
            i += 1
            continue
        fence, width = opening["fence"], len(opening["indent"])
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), None)
        if end is None:
            raise ValueError(f"line {i + 1}: the fence {fence}{opening['info']} is never closed")
        body = [_unindent(line, width) for line in lines[i + 1 : end]]
        mark = _NOT_RUN.match(lines[i - 1]) if i else None
        info = opening["info"].split()
        blocks.append(
            Block(i + 1, info[0].lower() if info else "", "\n".join(body) + "\n", mark["reason"] if mark else None)
        )
        i = end + 1
    return blocks


def _unindent(line: str, width: int) -> str:
    """``line`` without up to ``width`` columns of leading blanks (a fence indented in a list item)."""
    stripped = line.lstrip(" \t")
    return line[min(width, len(line) - len(stripped)) :]


def python_blocks(text: str) -> list[Block]:
    """The page's Python blocks: those fenced as ``python``."""
    return [block for block in fenced_blocks(text) if block.language == "python"]


@contextlib.contextmanager
def restored_state() -> Iterator[None]:
    """Put back what a page may change in the packages: the learners it registers (``LEARNERS``, and the
    registry's record of the names it checked) and the level and handlers of the package loggers."""
    from cory_agents.training import registry

    learners = dict(registry.LEARNERS)
    checked = set(getattr(registry, "_CHECKED", ()))
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    logging_state = [(logger.level, list(logger.handlers)) for logger in loggers]
    try:
        yield
    finally:
        registry.LEARNERS.clear()
        registry.LEARNERS.update(learners)
        if isinstance(getattr(registry, "_CHECKED", None), set):
            registry._CHECKED.clear()
            registry._CHECKED.update(checked)
        for logger, (level, handlers) in zip(loggers, logging_state):
            logger.setLevel(level)
            logger.handlers[:] = handlers


def run_page(path: Path, name: str | None = None) -> int:
    """Run the Python blocks of the page at ``path`` in order, in one fresh module; returns how many ran.
    A failure (:func:`pytest.fail`) names the page (``name``, default the path), the block's line and the
    exception."""
    name = name or str(path)
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    unexplained = [block.line for block in blocks if block.not_run is not None and not block.not_run.strip()]
    if unexplained:
        pytest.fail(f"{name}: '<!-- not run -->' without a reason before the block(s) at line(s) {unexplained}")
    module_name = "docs_page_" + re.sub(r"\W", "_", Path(name).stem)
    module = types.ModuleType(module_name, f"The Python blocks of {name}")
    module.__file__ = str(path)
    sys.modules[module_name] = module  # for what looks a class or function up by its module (pickle, dataclasses)
    ran = 0
    try:
        with restored_state():
            for block in blocks:
                if block.not_run is not None:
                    continue
                # Blank lines first, so that tracebacks give the page's line numbers (and linecache its text).
                source = "\n" * block.line + block.code
                try:
                    exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)
                except SystemExit as exc:
                    if exc.code not in (None, 0):
                        pytest.fail(_failure(name, block, exc), pytrace=False)
                except Exception as exc:  # noqa: BLE001 - reported with the page and line
                    pytest.fail(_failure(name, block, exc), pytrace=False)
                ran += 1
    finally:
        sys.modules.pop(module_name, None)
    return ran


def _failure(name: str, block: Block, exc: BaseException) -> str:
    tb = exc.__traceback__.tb_next if exc.__traceback__ else None  # from the block's own frame on
    trace = "".join(traceback.format_exception(type(exc), exc, tb))
    return f"{name}, the Python block at line {block.line}: {type(exc).__name__}: {exc}\n\n{trace}"


@pytest.mark.parametrize("page", PAGES)
def test_page_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    for package in INSTALLED.get(page, []):
        as_installed(package, tmp_path / "site", monkeypatch)
    run_page(DOCS / page, f"docs/{page}")  # how many blocks it has: test_page_block_count


def as_installed(package: Path, site: Path, monkeypatch) -> None:
    """The single-module package in the folder ``package`` as ``pip install`` leaves it: the folder on
    ``sys.path``, its distribution's metadata (name, entry points from its pyproject.toml) in ``site``."""
    import tomllib

    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    declare_distribution(site, project["name"], project.get("entry-points", {}), project["version"])
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.syspath_prepend(str(site))


@pytest.mark.parametrize("page", PAGES)
def test_page_block_count(page):
    blocks = fenced_blocks((DOCS / page).read_text(encoding="utf-8"))
    found = sum(block.language == "python" for block in blocks)
    assert BLOCKS.get(page) is not None, f"docs/{page} has {found} Python blocks: add {page!r}: {found} to BLOCKS"
    assert found == BLOCKS[page], f"docs/{page} has {found} Python blocks, BLOCKS says {BLOCKS[page]}"
    aliases = [(block.line, block.language) for block in blocks if block.language in PYTHON_ALIASES]
    assert not aliases, f"docs/{page}: fence these blocks as python, or they are not run: {aliases}"


SYNTHETIC = """\
# A page

```python
x = 20
```

A shell block is not Python, and neither is an indented one:

```bash
x = this is not python
```

    x = nor is this

<!-- not run: it would fail -->
```python
raise RuntimeError("a block marked not run ran")
```

- a list item with a block (indented fence):

    ````python
    from cory_agents.training.registry import LEARNERS

    LEARNERS["docs-synthetic"] = object()
    x += 1
    ````

~~~python
y = x + 21  # the names of earlier blocks
assert y == 42, y
z = y + undefined_name
~~~
"""


def test_a_failing_block_fails_with_its_page_and_line(tmp_path):
    from cory_agents.training.registry import LEARNERS

    page = tmp_path / "synthetic.md"
    page.write_text(SYNTHETIC, encoding="utf-8")
    blocks = python_blocks(SYNTHETIC)
    assert [(b.line, b.not_run) for b in blocks] == [(3, None), (16, "it would fail"), (22, None), (29, None)]
    assert blocks[2].code.startswith("from cory_agents") and "    " not in blocks[2].code
    with pytest.raises(pytest.fail.Exception) as failure:
        run_page(page, "synthetic.md")
    message = str(failure.value)
    assert message.startswith("synthetic.md, the Python block at line 29: NameError:"), message
    assert "undefined_name" in message
    assert f'File "{page}", line 32' in message  # the page's line, with its text
    assert "z = y + undefined_name" in message
    assert "docs-synthetic" not in LEARNERS  # the page's registration was taken back
    assert "docs_page_synthetic" not in sys.modules

    # The same page without its failing line runs, and a mark without a reason fails.
    page.write_text(SYNTHETIC.replace("z = y + undefined_name\n", ""), encoding="utf-8")
    assert run_page(page) == 3
    page.write_text(SYNTHETIC.replace("not run: it would fail", "not run"), encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match=r"without a reason .* at line\(s\) \[16\]"):
        run_page(page)


def test_an_unclosed_fence_or_a_syntax_error_is_reported(tmp_path):
    with pytest.raises(ValueError, match="line 3: the fence ```python is never closed"):
        python_blocks("Text\n\n```python\nx = 1\n")
    assert python_blocks("Use ``` ```python ``` inline.\n") == []
    page = tmp_path / "bad.md"
    page.write_text("# Bad\n\n```python\nx = (\n```\n", encoding="utf-8")
    with pytest.raises(pytest.fail.Exception, match=r"^bad\.md, the Python block at line 3: SyntaxError"):
        run_page(page, "bad.md")
