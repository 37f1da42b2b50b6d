"""Padding-free forward passes: a batch of padded contexts runs as one row of its real tokens.

Scoring and training passes see ``(B, W)`` contexts: left-padded prompts, then ``T`` response
columns (masked after an end-of-sequence token). A padding column costs as much as a real token
in every linear layer, and at the iteration benchmark's settings (the embedded default, 10-token
responses) 15-20% of the columns are padding. As with TRL's ``padding_free`` option,
:class:`PackedBatch` concatenates the real tokens into one ``(1, N)`` row, with positions
restarting at 0 for each context, so the linear layers, norms and activations run on the ``N``
real tokens only.

The tokens a context starts with in common with an earlier context of the batch are in the
row once. A prompt template's head is such a run in every context (the CORY observer's ``I can
make this sentence "``, the GSM8K one-shot exemplar); in a GRPO or RLOO batch, which holds
``group_size`` responses to each prompt, it is the whole prompt for all but the first of a
group (and any tokens their responses begin with in common), in whatever order a minibatch
has them. The hidden states of such tokens are the same in each context (same tokens, same
positions, causal attention), and their gradient is the sum of what each context sends back
through them, which autograd adds up from the copies attention reads. For the CORY observer at
the benchmark's settings that is 5-6 more tokens per context.

Attention alone must keep the contexts apart. :func:`attention`, registered with Hugging Face
as :data:`ATTENTION`, gathers the queries, keys and values into a right-padded ``(B, L)``
layout, with the shared tokens copied into every context that has them. There plain causal
attention is exact (a real token sees the real tokens of its own context before it). It runs
sdpa there and gathers the result back; a layer's sliding window (Mistral, Phi-3, Gemma 3's
local layers) becomes a banded causal mask in that layout, as Hugging Face's own masks band a
padded pass. Outputs and gradients equal the padded pass's to float rounding.
Called without a packed batch it is sdpa itself, so the same model still decodes with its KV
cache.

Not every sdpa model can be packed. :func:`~cory_agents.speed.attention_kinds.unsupported`
reads what the packed attention cannot compute from the config (soft-capped logits, chunked or
bidirectional attention, layer types other than full and sliding attention), and :func:`probe`
runs the model once packed and once padded on a small batch when it is switched: a model whose
layers do not pass the packed batch on to attention (Falcon's decoder layer drops extra arguments), or whose packed logits are not the
padded ones, keeps the padded passes, with one logged line. ``docs/supported-models.md`` lists
what each family gets.

A run makes its models padding-free when it builds them (``cory_agents.training.build``, unless
``--no-padding-free``), as nanoGPT's speed mechanisms wrap the model and the loop never knows:
:func:`enable` switches a model from sdpa to :data:`ATTENTION` and mixes
:class:`PaddingFreeForward` into its class (and into a value head's around it). Its ``forward``
then packs every call that asks for some columns' outputs of a padded batch
(``logits_to_keep`` a tensor of columns; the scoring and training passes of
:func:`~cory_agents.learners.lm.response_inputs`, and the prefill of a turn's prompts by
:class:`~cory_agents.acting.actor.LMActor`) where the masks allow (at least one real token before the
response; masked columns inside a context, a carried context's between its turns, are left out
as padding is), and returns what the padded call would: logits and
values ``(B, K, ...)``, and a KV cache laid out as a padded prefill leaves it
(:meth:`PackedBatch.left_pad`), so the token steps run as before. The actor and the learners
call a model one plain way, and never import this module. Other attention implementations
(eager, flash attention) keep the padded passes. A prefill into a KV cache whose layers are not
plain dynamic ones (sliding-window or static layers, which keep a layout of their own) is not
packed either.

Example:
    >>> import torch
    >>> ids = torch.tensor([[0, 0, 5, 6, 7], [3, 4, 5, 6, 7]])
    >>> mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    >>> packed = PackedBatch.pack(ids, mask, keep=torch.tensor([2, 3]))  # the columns predicting 2 response tokens
    >>> packed.input_ids.tolist(), packed.position_ids.tolist()
    ([[5, 6, 7, 3, 4, 5, 6, 7]], [[0, 1, 2, 0, 1, 2, 3, 4]])
    >>> packed.logits_to_keep.tolist()
    [0, 1, 5, 6]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from cory_agents.speed.attention_kinds import sliding_windows, unsupported
from cory_env.models import hugging_face_model

logger = logging.getLogger(__name__)

#: The attention implementation's name (it contains "sdpa", so Hugging Face checks it as sdpa).
ATTENTION = "padding_free_sdpa"


@dataclass(frozen=True)
class PackedBatch:
    """The real tokens of ``B`` padded contexts as one row, and where each goes back.

    The tokens a context starts with in common with an earlier context (a prompt
    template's head, a GRPO group's prompt) are in the row once: their hidden states are the
    same in each of those contexts (same tokens, same positions, causal attention), and the
    gradient through them is the sum of what each context sends back.

    Attributes:
        input_ids: ``(1, N)`` each context's own tokens (those it does not share with an
            earlier one), context after context.
        position_ids: ``(1, N)`` each token's position in its context(s).
        logits_to_keep: ``(B * K,)`` the tokens at each context's ``K`` kept columns,
            context-major (a kept column after a context's last real token gets that token,
            an output the caller masks anyway).
        index: ``(N,)`` each token's place in the right-padded ``(B, L)`` layout, flattened (a
            shared token's: in the first context that has it).
        source: ``(B * L,)`` the token at each place of that layout (padding: token 0, which no
            real token attends to, as it comes after them).
        batch_size: ``B``.
        width: ``L``, the longest context's real length.
        shared: ``(B,)`` how many tokens each context starts with in common with an earlier
            one (the most with any; 0 for the first).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    logits_to_keep: torch.Tensor
    index: torch.Tensor
    source: torch.Tensor
    batch_size: int
    width: int
    shared: torch.Tensor
    attended: list[int | None] = field(default_factory=list, compare=False, repr=False)  # each layer's window
    masks: dict[int, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)  # by window

    @classmethod
    def pack(cls, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: torch.Tensor) -> PackedBatch | None:
        """Pack ``(B, W)`` contexts, keeping the outputs of the columns ``keep`` (increasing; for the
        response, :func:`~cory_agents.learners.lm.predicting_columns`). ``None`` if nothing is padded and
        no context shares tokens with an earlier one (the padded pass is the same), if some
        context is empty, or if its real tokens start after ``keep[0]`` (the padded pass handles those).
        A context's real tokens need not be one run: masked columns inside it (a carried context's, between
        its turns) are left out like padding, the positions counting real tokens only, as
        :func:`~cory_agents.acting.actor.generate_positions` counts them."""
        B, W = input_ids.shape
        device = input_ids.device
        real = attention_mask.bool()
        lengths = real.sum(-1)
        starts = real.int().argmax(-1)  # first real column
        if bool((starts > keep[0]).any() | (lengths == 0).any()):
            return None
        # Each context's real tokens in order, wherever they are: a carried context has masked columns
        # between its turns (cory_env.context.Turn.carry), and its positions count real tokens only.
        columns = torch.sort((~real).int(), dim=-1, stable=True).indices  # (B, W): real columns first
        owner = _first_with_prefix(input_ids.gather(1, columns), lengths)
        layout = torch.arange(owner.shape[1], device=device)
        contexts = torch.arange(B, device=device)
        shared = ((owner < contexts[:, None]) & (layout < lengths[:, None])).sum(-1)  # a prefix of each context
        if bool((shared == 0).all() & real.all()):
            return None
        own = lengths - shared  # each context's tokens after those
        offsets = own.cumsum(0) - own  # where each context's own tokens start in the row
        rows = contexts.repeat_interleave(own)
        positions = shared[rows] + torch.arange(rows.numel(), device=device) - offsets[rows]  # in the context
        width = owner.shape[1]
        source = torch.where(layout < lengths[:, None], offsets[owner] + layout - shared[owner], 0)
        at = (real.cumsum(-1)[:, keep] - 1).clamp(min=0)  # each kept column's real token (the last before it)
        return cls(
            input_ids=input_ids[rows, columns[rows, positions]][None],
            position_ids=positions[None],
            logits_to_keep=source.gather(1, at).reshape(-1),
            index=rows * width + positions,
            source=source.reshape(-1),
            batch_size=B,
            width=width,
            shared=shared,
        )

    def window_mask(self, window: int | None, device: torch.device) -> torch.Tensor | None:
        """``(1, 1, L, L)`` the causal mask of a sliding ``window`` in the right-padded layout (a
        query sees the keys less than ``window`` positions before it), or ``None`` where plain
        causal attention is the same (no window, or one as wide as the layout)."""
        if window is None or window >= self.width:
            return None
        if window not in self.masks:
            at = torch.arange(self.width, device=device)
            distance = at[:, None] - at[None]  # query position - key position
            self.masks[window] = ((distance >= 0) & (distance < window))[None, None]
        return self.masks[window]

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """``(1, B * K, ...)`` outputs at :attr:`logits_to_keep` as ``(B, K, ...)``."""
        if not self.attended:
            raise RuntimeError(
                "the model's attention never received the packed batch, so its contexts were not kept apart: "
                "its attention implementation is not cory_agents.speed.padding_free's (turn padding-free passes off: "
                "--no-padding-free, or TrainConfig(padding_free=False))"
            )
        return x.reshape(self.batch_size, -1, *x.shape[2:])

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """``(1, H, N, D)`` heads of the packed row as ``(B, H, L, D)``, each context right-padded
        (shared tokens copied into every context that has them)."""
        return self._take(x, self.source.view(self.batch_size, self.width))

    def left_pad(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``(1, H, N, D)`` states of the packed row (a KV cache layer's keys or values) in the
        padded ``(B, H, W, D)`` layout of ``attention_mask``, the layout a padded pass leaves in the
        cache: each context's states in its real columns. Padding columns get a copy of a real
        token's states, which the mask hides."""
        # each column's real token (a masked column: the last real one before it, or the first)
        at = (attention_mask.int().cumsum(-1) - 1).clamp(0, self.width - 1)
        return self._take(x, self.source.view(self.batch_size, self.width).gather(1, at))

    @staticmethod
    def _take(x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """``(1, H, N, D)`` heads of the packed row at the row's tokens ``tokens`` ``(B, M)``: ``(B, H, M, D)``."""
        _, H, _, D = x.shape
        B, M = tokens.shape
        return x[0].transpose(0, 1).index_select(0, tokens.reshape(-1)).view(B, M, H, D).transpose(1, 2)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, L, H, D)`` attention outputs back to the packed row, ``(1, N, H, D)``."""
        return x.reshape(self.batch_size * self.width, *x.shape[2:]).index_select(0, self.index)[None]


def _first_with_prefix(tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``(B, L)``: for each position ``l`` of each context's real tokens (``tokens``, each context's real
    tokens first, then anything), the first context whose real tokens begin with the same ``l + 1``
    tokens (the context itself if none before it does; 0 after a context's end), ``L`` being the
    longest context's length.

    Contexts are sorted by their tokens (``torch.unique`` over rows sorts them lexicographically,
    on the device), so that those starting alike are neighbours; for each position, a run of
    neighbours that agree up to it is one set of contexts sharing that prefix, and its smallest
    index is the first. Exact (no hashing); the batch's order does not matter, so shuffled
    minibatches still share a GRPO group's prompt.
    """
    B = tokens.shape[0]
    L = int(lengths.max())
    device = tokens.device
    layout = torch.arange(L, device=device)
    valid = layout < lengths[:, None]
    tokens = tokens[:, :L].masked_fill(~valid, -1)
    _, rank = torch.unique(tokens, dim=0, return_inverse=True)  # rows sorted lexicographically, on the device
    order = torch.sort(rank, stable=True).indices
    ranked = tokens[order]
    agree = (ranked[1:] == ranked[:-1]) & (ranked[1:] >= 0)  # neighbours' tokens, position by position
    common = torch.cat([agree.new_zeros(1, L), agree.int().cumprod(-1).bool()])  # same prefix up to l as the one before
    run = (~common).int().cumsum(0) - 1  # (B, L): which run of same-prefix neighbours, per position
    first = torch.full((B * L,), B, device=device).scatter_reduce(
        0, (run * L + layout).reshape(-1), order[:, None].expand(B, L).reshape(-1), "amin"
    )
    owner = torch.empty_like(tokens)
    owner[order] = first[run * L + layout]
    return owner.masked_fill(~valid, 0)


def attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    packed: PackedBatch | None = None,
    probe_calls: list[bool] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Hugging Face's sdpa attention, run per context when the model was called with ``packed``.

    A layer's sliding window (the ``sliding_window`` its attention passes: Mistral and Phi-3 on
    every layer, Gemma 3 and Qwen2 on those its ``layer_types`` say) is kept as Hugging Face's
    masks keep it: a token sees the ``sliding_window - 1`` tokens before it and itself."""
    if probe_calls is not None:  # a :func:`probe` pass: whether each call had the packed batch
        probe_calls.append(packed is not None)
    if packed is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    packed.attended.append(kwargs.get("sliding_window"))
    mask = packed.window_mask(kwargs.get("sliding_window"), query.device)
    out, _ = sdpa_attention_forward(module, packed.pad(query), packed.pad(key), packed.pad(value), mask, **kwargs)
    return packed.unpad(out), None


AttentionInterface.register(ATTENTION, attention)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # the masks of unpacked calls (decoding) are sdpa's


class PaddingFreeForward:
    """Mixed into a model's own class by :func:`enable`: its ``forward`` runs a padded batch packed.

    A call that asks for the outputs of some columns (``logits_to_keep`` a 1-D tensor) of ``(B, W)``
    left-padded contexts (``attention_mask``), with no tokens in its KV cache yet and no hidden
    states or attentions asked for, is packed (:meth:`PackedBatch.pack`); the model's own forward
    runs on the packed row, and what it returns comes back as the padded call's: logits (and a
    value head's values) ``(B, len(keep), ...)``, and a KV cache laid out as a padded prefill leaves
    it (:meth:`PackedBatch.left_pad`), so the token steps that follow run as usual. Any other call,
    or one whose masks do not allow packing, is the model's own forward. The callers never know.
    """

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        packed = None if args else _pack(**kwargs)
        if packed is None:
            return super().forward(*args, **kwargs)
        row = dict(input_ids=packed.input_ids, attention_mask=None, position_ids=packed.position_ids)
        out = super().forward(**{**kwargs, **row, "logits_to_keep": packed.logits_to_keep, "packed": packed})
        if (cache := kwargs.get("cache")) is not None:  # keys and values as a padded prefill leaves them
            mask = kwargs["attention_mask"]
            for layer in cache.layers:
                layer.keys, layer.values = packed.left_pad(layer.keys, mask), packed.left_pad(layer.values, mask)
        if isinstance(out, tuple):  # a value head's (logits, values)
            return type(out)(packed.unpack(x) for x in out)
        out.logits = packed.unpack(out.logits)
        return out


def _pack(
    input_ids: Any = None,
    attention_mask: Any = None,
    logits_to_keep: Any = 0,
    cache: Any = None,
    packed: PackedBatch | None = None,
    output_hidden_states: bool | None = None,
    output_attentions: bool | None = None,
    **_: Any,
) -> PackedBatch | None:
    """The packed batch of a call :class:`PaddingFreeForward` may pack (see there), else ``None``."""
    if packed is not None or output_hidden_states or output_attentions:  # packed already, or asks for more
        return None
    columns = torch.is_tensor(logits_to_keep) and logits_to_keep.dim() == 1
    padded = torch.is_tensor(input_ids) and input_ids.dim() == 2 and torch.is_tensor(attention_mask)
    if not (columns and padded and attention_mask.shape == input_ids.shape):
        return None
    if cache is not None and cache.get_seq_length() > 0:  # a token step: the cache holds the context
        return None
    if cache is not None and any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None  # a sliding-window or static layer keeps its own layout: the padded prefill fills it
    return PackedBatch.pack(input_ids, attention_mask, logits_to_keep)


_PADDING_FREE_CLASSES: dict[type, type] = {}


def _mix_in(module: nn.Module) -> None:
    """Give ``module`` its class with :class:`PaddingFreeForward` mixed in (same name: a saved model's
    ``architectures`` stay the original's; weights, state dict keys and deep copies are unchanged)."""
    cls = type(module)
    if issubclass(cls, PaddingFreeForward):
        return
    if cls not in _PADDING_FREE_CLASSES:
        names = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
        _PADDING_FREE_CLASSES[cls] = type(cls.__name__, (PaddingFreeForward, cls), names)
    module.__class__ = _PADDING_FREE_CLASSES[cls]


def enable(model: nn.Module) -> bool:
    """Make ``model``'s passes padding-free, where its attention allows: switch the Hugging Face
    model inside it from sdpa to :data:`ATTENTION` (the same kernel) and mix
    :class:`PaddingFreeForward` into its class, and into ``model``'s own if ``model`` wraps it (a
    value head: it then packs once, outside). Return whether it is on.

    Other attention implementations are left as they are (``False``). So is a model that
    :func:`~cory_agents.speed.attention_kinds.unsupported` rules out, or whose :func:`probe` pass
    (one packed and one padded pass of a small batch, the first time) finds its attention not given the packed batch or its outputs
    not the padded pass's: it keeps the padded passes, with one logged line saying why. Apply it
    to a base model before copying it (copies keep the class and the attention implementation)."""
    hf = hugging_face_model(model)
    if hf is None:
        return False
    if hf.config._attn_implementation == "sdpa" and not hasattr(hf, "padding_free_off"):
        reason = unsupported(hf)
        if reason is None:
            hf.set_attn_implementation(ATTENTION)
            _mix_in(hf)
            reason = probe(hf)
            if reason is not None:
                hf.__class__ = type(hf).__bases__[-1]  # the model's own class, without PaddingFreeForward
                hf.set_attn_implementation("sdpa")
        if reason is not None:
            hf.padding_free_off = reason  # copies keep it: no second probe
            _log_fallback(hf, reason)
            return False
    if hf.config._attn_implementation != ATTENTION:
        return False
    _mix_in(hf)
    if model is not hf:
        _mix_in(model)
    return True


def probe(model: nn.Module, batch_size: int = 3, keep: int = 4) -> str | None:
    """Run a switched model once packed and once padded on a small batch of random tokens (left padding,
    a head two contexts share, longer than a small sliding window); return why its passes must stay
    padded, or ``None`` if every attention call of the packed pass had the packed batch and its
    logits are the padded pass's. The model's random draws are not touched (its own generator)."""
    hf = hugging_face_model(model)
    config = hf.config.get_text_config()
    windows = [w for w in sliding_windows(hf) if w is not None]
    width = max(12, min(min(windows, default=0) + 4, 64))  # past a window, where that is cheap
    generator = torch.Generator().manual_seed(0)
    device = next(hf.parameters()).device
    ids = torch.randint(0, min(config.vocab_size, 1000), (batch_size, width), generator=generator).to(device)
    ids[1, :3] = ids[0, 2:5]  # context 1 starts as context 0 does: a shared head
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    columns = torch.arange(width - keep, width, device=device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    calls: dict[str, list[bool]] = {"padded": [], "packed": []}  # attention's calls, passed down as an argument
    logits: dict[str, torch.Tensor] = {}
    failure = None
    try:
        with torch.no_grad():
            for kind, kept in (("padded", keep), ("packed", columns)):
                row = dict(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=kept)
                logits[kind] = hf(**row, use_cache=False, probe_calls=calls[kind]).logits.float()
    except Exception as error:  # noqa: BLE001 - any failure of the packed pass means: keep the padded one
        failure = f"its probe pass failed ({type(error).__name__}: {error})"
    if not calls["padded"] and "padded" in logits:
        return "its layers do not pass extra arguments on to attention: it does not receive the packed batch"
    if "padded" in logits and calls["packed"] != [True] * len(calls["padded"]):
        return "its attention does not receive the packed batch (its layers do not pass it on)"
    if failure is not None:
        return failure
    padded, packed = logits["padded"], logits["packed"]
    tolerance = 1e-4 if hf.dtype == torch.float32 else 2e-2
    error = float((packed - padded).abs().max()) / max(1.0, float(padded.abs().max()))
    if not error <= tolerance:
        return f"its packed logits differ from the padded pass's by {error:.2g} (relative; tolerance {tolerance:g})"
    return None


_LOGGED: set[tuple[str, str]] = set()


def _log_fallback(hf: nn.Module, reason: str) -> None:
    """One line per model and reason: copies of a model and wrappers around it are not probed again, and
    a model loaded again by name (a MAPPO critic) is not logged again."""
    name = getattr(hf.config, "name_or_path", "")
    if name and (name, reason) in _LOGGED:
        return
    _LOGGED.add((name, reason))
    logger.warning("padding-free passes are off for %s: %s; it runs padded passes", name or type(hf).__name__, reason)


def fallback_reason(model: nn.Module) -> str | None:
    """Why :func:`enable` left ``model``'s passes padded (``None`` if they are padding-free or it was
    not called): the reason it logged, or the attention implementation that is not sdpa."""
    hf = hugging_face_model(model)
    if hf is None or is_enabled(model):
        return None
    if hasattr(hf, "padding_free_off"):
        return hf.padding_free_off
    implementation = hf.config._attn_implementation
    return None if implementation == "sdpa" else f"its attention implementation is {implementation!r}, not sdpa"


def is_enabled(model: nn.Module) -> bool:
    """Whether ``model``'s forward passes can be padding-free (:func:`enable` was applied)."""
    hf = hugging_face_model(model)
    return hf is not None and hf.config._attn_implementation == ATTENTION and isinstance(hf, PaddingFreeForward)
