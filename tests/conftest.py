"""Shared fixtures (helpers are in tests/support). Tests never touch the Hugging Face Hub."""

from __future__ import annotations

import logging
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Inductor's on-disk cache is keyed by the code, not by the CPU kernel settings (ATEN_CPU_CAPABILITY,
# ONEDNN_MAX_CPU_ISA, ...): a decode step compiled under one set gave NaN logits when reused under another
# (torch 2.13, CI's numerics runs). Each test session compiles --compile's steps in a cache of its own.
# The session's process removes it at exit (pytest-xdist's workers inherit it and leave it alone).
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="cory-inductor-")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tests.support.envs import PROMPTS, length_reward  # noqa: E402


@pytest.fixture(scope="session")
def gpt2_tokenizer():
    """GPT-2's real BPE tokenizer (50257 tokens, no pad token), built offline:
    :func:`tests.support.toy.gpt2_tokenizer`."""
    from tests.support.toy import gpt2_tokenizer

    tokenizer = gpt2_tokenizer()
    assert len(tokenizer) == 50257
    return tokenizer


@pytest.fixture(scope="session")
def embedded_tokenizer():
    """The embedded default's tokenizer (SmolLM2-135M), converted once into the cache."""
    from cory_env.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="module")
def toy_model(tmp_path_factory) -> Path:
    """A folder with the tiny random Llama over the toy word tokenizer (:mod:`tests.support.toy`), saved
    once per test module."""
    from tests.support.toy import save_tiny_llama, toy_tokenizer

    return save_tiny_llama(tmp_path_factory.mktemp("toy_llama"), toy_tokenizer())


@pytest.fixture
def make_env(gpt2_tokenizer):
    """Factory for small environments over GPT-2's tokenizer (no model needed)."""
    from cory_env import env

    def make(num_conversations=None, **kwargs):
        kwargs.setdefault("tokenizer", gpt2_tokenizer)
        kwargs.setdefault("prompts", PROMPTS)
        kwargs.setdefault("reward_fn", length_reward)
        kwargs.setdefault("max_new_tokens", (2, 5))
        kwargs.setdefault("context_length", 64)
        return env(num_conversations=num_conversations, **kwargs)

    return make


@pytest.fixture
def run(monkeypatch, capsys):
    """``run(main, prog, args)``: a command's ``main()`` as its console script calls it (``sys.argv`` set, no
    argv); returns its exit status and stderr. cory-train's log handler is taken off again afterwards."""
    loggers = [logging.getLogger(name) for name in ("cory_agents", "cory_env")]
    before = [(logger.level, list(logger.handlers)) for logger in loggers]

    def run_(main, prog: str, args: list[str]) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", [prog, *args])
        with pytest.raises(SystemExit) as exit_:
            main()
        return exit_.value.code, capsys.readouterr().err

    yield run_
    for logger, (level, handlers) in zip(loggers, before):
        logger.setLevel(level)
        logger.handlers[:] = handlers
