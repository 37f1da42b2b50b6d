"""Text-classifier reward: the raw logit of a classifier's positive label.

This is the CORY paper's IMDB reward (and TRL's sentiment example's): the
``lvwerra/distilbert-imdb`` classifier scores ``query + response``, and the reward is
the raw (unnormalised) logit of its ``POSITIVE`` label. Any Hugging Face
sequence-classification model works: a Hub name where the Hub (or its cache) is
available, or a local folder.

Example:
    >>> reward = ClassifierReward("lvwerra/distilbert-imdb", device="cuda")  # doctest: +SKIP
    >>> reward(["This movie"], [" was wonderful"])  # doctest: +SKIP
    [2.87]
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import torch

from cory_env.errors import UsageError
from cory_env.hub import hub_offline
from cory_env.models import check_model_path, local_load_failed

logger = logging.getLogger(__name__)

#: Label names (upper case) taken as "positive" when ``positive_label`` is not given.
POSITIVE_NAMES = ("POSITIVE", "POS")

#: Truncation length when neither the tokenizer nor the model config states one.
FALLBACK_MAX_LENGTH = 512


class NoPositiveLabelError(UsageError):
    """The classifier has no label that can be taken as positive: pass ``positive_label``."""


class ClassifierReward:
    """Batched reward: the logit of the classifier's positive label for each ``query + response``.

    Args:
        model: Hub name or local folder of a sequence-classification model (with its tokenizer).
        device: where the classifier runs (the agents' device); ``None``: CUDA if available, else CPU.
        batch_size: texts per forward pass; larger batches are split into chunks of this size.
        positive_label: the label whose logit is the reward. Default: the label named
            ``POSITIVE`` (or ``POS``, any case); for a model with at most two unnamed labels
            (``LABEL_0``/``LABEL_1``), the last one.
        max_length: texts are truncated to this many tokens; default: the smaller of the
            tokenizer's ``model_max_length`` and the model's ``max_position_embeddings``.

    Raises:
        OSError: the model or its tokenizer cannot be loaded (offline and not cached,
            or no such model).
        NoPositiveLabelError: no positive label can be found (pass ``positive_label``).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        device: str | torch.device | None = None,
        batch_size: int = 32,
        positive_label: str | None = None,
        max_length: int | None = None,
    ):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.name = os.fspath(model)
        self.device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        self.batch_size = int(batch_size)
        check_model_path(self.name, "reward model", tokenizer=True)
        local_only = hub_offline() and not os.path.isdir(self.name)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.name, local_files_only=local_only)
        except ValueError as err:  # a local folder without tokenizer files (a Hub name fails with an OSError)
            if not os.path.isdir(self.name):
                raise
            raise local_load_failed("tokenizer", self.name, err, flag="--reward") from err
        self.model = AutoModelForSequenceClassification.from_pretrained(
            self.name, local_files_only=local_only, dtype=torch.float32
        )
        self.model.to(self.device).eval().requires_grad_(False)
        if self.tokenizer.pad_token is None:  # GPT-2-style classifiers: pad with EOS, as TRL does
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.positive_index, self.positive_label = _positive(self.model.config.id2label, positive_label, self.name)
        self.max_length = int(max_length) if max_length is not None else _max_length(self.tokenizer, self.model.config)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name!r}, label={self.positive_label!r}, device={self.device}, "
            f"batch_size={self.batch_size}, max_length={self.max_length})"
        )

    def _chunks(self, texts: list[str]) -> Iterator[list[str]]:
        for start in range(0, len(texts), self.batch_size):
            yield texts[start : start + self.batch_size]

    @torch.inference_mode()
    def __call__(self, queries: list[str], responses: list[str], **_: Any) -> list[float]:
        if len(queries) != len(responses):
            raise ValueError(f"got {len(queries)} queries but {len(responses)} responses")
        scores: list[float] = []
        for chunk in self._chunks([q + r for q, r in zip(queries, responses)]):
            enc = self.tokenizer(
                chunk, return_tensors="pt", padding=True, truncation=True, max_length=self.max_length
            ).to(self.device)
            logits = self.model(**enc).logits
            scores.extend(logits[:, self.positive_index].float().cpu().tolist())
        return scores


def _positive(id2label: dict[int, str], wanted: str | None, name: str) -> tuple[int, str]:
    """(index, label) of the positive label."""
    labels = {int(i): str(label) for i, label in id2label.items()}
    if wanted is not None:
        for i, label in labels.items():
            if label.upper() == wanted.upper():
                return i, label
        raise NoPositiveLabelError(
            f"classifier {name!r} has no label {wanted!r}; its labels are {sorted(labels.values())}"
        )
    for candidate in POSITIVE_NAMES:
        for i, label in labels.items():
            if label.upper() == candidate:
                return i, label
    if len(labels) <= 2:
        i = max(labels)
        logger.info("classifier %r has no POSITIVE label; using label %d (%s) as positive", name, i, labels[i])
        return i, labels[i]
    raise NoPositiveLabelError(
        f"classifier {name!r} has {len(labels)} labels {sorted(labels.values())} and none is named POSITIVE: "
        "choose one with positive_label"
    )


def _max_length(tokenizer: Any, config: Any) -> int:
    limits = [
        n
        for n in (getattr(tokenizer, "model_max_length", None), getattr(config, "max_position_embeddings", None))
        if isinstance(n, int) and 0 < n < 1_000_000  # tokenizers without a limit report ~1e30
    ]
    return min(limits) if limits else FALLBACK_MAX_LENGTH
