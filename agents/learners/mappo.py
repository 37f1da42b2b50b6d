"""MAPPO: multi-agent PPO with a centralised critic (Yu et al., NeurIPS 2022), a team learner over PPO members.

Each agent ``i`` keeps its own policy and learns with PPO's clipped loss; the value function is one
critic ``V_phi``, shared by every agent, that reads the **global state**: at agent ``i``'s token ``t``::

    s^i_t = (id^i, z, x^i, y^i_{<t})

``id^i`` the learner acting (``learner: llm_0``: the role exchange moves each learner from one position
to another, and the value of a state depends on whose policy plays on from it; MAPPO's agent id in the
critic's input), ``z`` every agent's private information (the task's private fields, ``name: value``
lines: the signalling game's secret, which only the sender sees), ``x^i`` the agent's prompt (the query
and the earlier answers; its position in the chain shows in it), ``y^i_{<t}`` its answer so far. In this
chain the rest of every earlier agent's context is already in ``x^i``, and a later agent's context does
not exist yet; so ``z`` is what the critic sees that the agent cannot. (A game without private fields
leaves ``z`` empty: the critic is then a value model of its own, shared by the agents, apart from their
policies.) With ``r^i_t`` the member's per-token reward (its KL penalty ``-beta_i KL^i_t``, plus the
collective reward at its answer's last token, as in PPO)::

    delta^i_t = r^i_t + gamma V(s^i_{t+1}) - V(s^i_t)        (V = 0 after the agent's last token)
    A^i_t     = sum_l (gamma lam)^l delta^i_{t+l}            GAE, across an agent's turns over rounds
    G^i_t     = A^i_t + V_old(s^i_t)                         the critic's target

Each member learns from ``A^i`` (whitened there) with its own value head left out (no value loss). The
critic predicts normalised values (``--value-norm``, on by default as in the reference:
:mod:`cory_agents.algorithms.value_norm`): ``V = sigma v_phi + mu``, its targets ``(G - mu) / sigma``,
the running ``mu, sigma`` updated with every iteration's targets before the fit. It then minimises PPO's
clipped value loss (in the normalised space) over every agent's tokens, ``--critic-epochs`` passes, each
over all agents' conversations shuffled together (a minibatch mixes roles)::

    L(phi) = 1/2 mean_t max((v_phi(s_t) - g_t)^2, (clip(v_phi(s_t), v_old - eps_v, v_old + eps_v) - g_t)^2)

The reference code (on-policy's MAPPO, HARL) trains the critic at the actors' learning rate for as many
epochs as the actors (5 by default in HARL, ``critic_epoch``); here the critic's rate is ``--value-lr``
(``--lr`` if 0, the reference's ratio) and its epochs ``--critic-epochs`` (5). Its explained variance is
logged per learner and per role (``critic/explained_variance_<role>``). The critic is the run's model
with a zero-initialised value head (the members' own learn nothing), owned by the team: placed,
synchronised and saved by the trainer (:class:`~cory_agents.learners.team.TeamRun`). Not done here: the
Huber value loss of the reference (with its threshold 10 on normalised targets it is the squared loss
for all but outliers) and parameter sharing between the policies (each agent here is its own model, as
in CORY).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from cory_agents.algorithms.advantages import explained_variance, gae_over_turns
from cory_agents.algorithms.losses import value_loss
from cory_agents.algorithms.value_norm import ValueNorm
from cory_agents.learners.base import Episode, load_weights
from cory_agents.learners.dropout import disable_dropout
from cory_agents.learners.lm import flag, response_inputs
from cory_agents.learners.ppo import PPOConfig, PPOLearner
from cory_agents.learners.team import TeamEpisode, TeamRun
from cory_agents.learners.value_model import CausalLMWithValueHead
from cory_env.errors import UsageError

#: The critic's minibatch order: a random stream apart from the members' (seeded with the run's seed too).
CRITIC_STREAM = 2


@dataclass(kw_only=True)
class MAPPOConfig(PPOConfig):
    """``--learner mappo``: PPO's settings, for each member and for the critic (``value_lr``, ``cliprange_value``),
    and the critic's own: its epochs and value normalisation."""

    _argument_group_name: ClassVar[str] = "Learner mappo: PPO members, one centralised critic over the global state"

    critic_epochs: int = flag(5, "mappo: the critic's passes over each batch (the reference's critic_epoch)")
    value_norm: bool = flag(
        True, "mappo: the critic learns normalised targets (running mean and std, as the reference)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.critic_epochs, int) and self.critic_epochs >= 1):
            raise UsageError(f"--critic-epochs must be at least 1 (the reference: 5), got {self.critic_epochs}")


class MAPPO:
    """PPO members and one shared critic over the global state (module docstring).

    Args:
        members: ``{learner name: PPOLearner}``, one per agent.
        critic: a :class:`CausalLMWithValueHead` the team owns (``run.own`` placed it).
        tokenizer: the critic's (and the members'): writes the private fields in its tokens.
        run: the run's :class:`~cory_agents.learners.team.TeamRun` (its optimizer steps).
        config: the members' :class:`MAPPOConfig`.
        seed: seeds the critic's minibatch order.
    """

    def __init__(
        self,
        members: dict[str, PPOLearner],
        critic: CausalLMWithValueHead,
        tokenizer: Any,
        run: TeamRun,
        config: MAPPOConfig,
        seed: int = 0,
    ):
        not_ppo = [name for name, member in members.items() if not isinstance(member, PPOLearner)]
        if not_ppo:
            raise TypeError(f"MAPPO's members are PPO learners (given advantages); {not_ppo} are not")
        self.members, self.critic, self.tokenizer, self.config = members, critic, tokenizer, config
        self.device = next(critic.parameters()).device
        params = [p for p in critic.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.value_lr or config.lr, weight_decay=config.weight_decay)
        self.steps = run.optimizer_steps(critic, optimizer, config.max_grad_norm or None)
        self.generator = torch.Generator().manual_seed(
            int(np.random.SeedSequence([seed, CRITIC_STREAM]).generate_state(1)[0])
        )
        self.value_norm = ValueNorm() if getattr(config, "value_norm", False) else None
        self.identity = self.identities()

    def learn(self, team: TeamEpisode) -> dict[str, dict[str, float]]:
        c = self.config
        private = self.private_information(team)
        stats: dict[str, dict[str, float]] = {}
        batches = []  # (critic inputs, old outputs, returns, mask) of each member's rows
        explained: dict[str, float] = {}
        for name in team.order:
            ep = team.episodes[name]
            ids, attn = self.critic_inputs(ep, private, name)
            outputs = self.values(ids, attn, ep.response_width, grad=False)  # normalised with --value-norm
            old_values = self.denormalize(outputs)
            kept: dict[str, torch.Tensor] = {}

            def estimate(rewards: torch.Tensor, mask: torch.Tensor, ep: Episode = ep, values=old_values, kept=kept):
                values = values.to(rewards.device) * mask
                advantages, kept["returns"] = gae_over_turns(rewards, values, mask, ep.turns, c.gamma, c.lam)
                kept["mask"] = mask
                return advantages

            stats[name] = self.members[name].learn(ep, advantages=estimate)
            returns, mask = kept["returns"].to(self.device), kept["mask"].to(self.device)
            ev = float(
                team.data_parallel.mean({"ev": float(explained_variance(old_values * mask, returns, mask))})["ev"]
            )
            stats[name]["critic_explained_variance"] = explained[team.roles[name]] = ev
            batches.append((ids, attn, outputs * mask, returns, mask))
        if self.value_norm is not None:  # one batch of targets: every member's, on every process
            sums = {"n": 0.0, "g": 0.0, "g2": 0.0}
            for _, _, _, returns, mask in batches:
                real = returns.double()[mask.bool()]
                sums = {
                    "n": sums["n"] + real.numel(),
                    "g": sums["g"] + float(real.sum()),
                    "g2": sums["g2"] + float((real**2).sum()),
                }
            total = team.data_parallel.sum(sums)
            if total["n"]:
                self.value_norm.update_moments(total["g"] / total["n"], total["g2"] / total["n"])
            batches = [(i, a, old, self.normalize(ret) * m, m) for i, a, old, ret, m in batches]
        fitted = self.fit(pooled(batches, self.tokenizer.pad_token_id or 0))
        stats["critic"] = {
            **team.data_parallel.mean(fitted),
            **{f"explained_variance_{r}": v for r, v in explained.items()},
        }
        return stats

    def normalize(self, values: torch.Tensor) -> torch.Tensor:
        return values if self.value_norm is None else self.value_norm.normalize(values)

    def denormalize(self, values: torch.Tensor) -> torch.Tensor:
        return values if self.value_norm is None else self.value_norm.denormalize(values)

    def private_information(self, team: TeamEpisode) -> list[list[int]]:
        """``z`` of each conversation, in the critic's tokens: every private field as a ``name: value`` line
        (none: empty)."""
        env = team.env
        fields = sorted(getattr(env.turn_prompts, "private_fields", {}) or {}) if env is not None else []
        if not fields:
            return [[] for _ in range(next(iter(team.episodes.values())).num_conversations)]
        texts = ["".join(f"{f}: {p.metadata[f]}\n" for f in fields) for p in env.prompts]
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def identities(self) -> dict[str, list[int]]:
        """``id^i`` of each member: the line ``learner: NAME`` in the critic's tokens. A tokenizer that writes two
        members' lines alike (a word-level vocabulary without their names) gets member ``k``'s line followed by
        the ``k``-th ordinary (not special) token of its vocabulary, so that the critic still tells them apart."""
        lines = {
            name: self.tokenizer(f"learner: {name}\n", add_special_tokens=False)["input_ids"] for name in self.members
        }
        if len({tuple(line) for line in lines.values()}) == len(lines):
            return lines
        special = set(self.tokenizer.all_special_ids)
        ordinary = [i for i in range(len(self.tokenizer)) if i not in special]
        return {name: [*line, ordinary[k]] for k, (name, line) in enumerate(lines.items())}

    def critic_inputs(self, ep: Episode, private: list[list[int]], name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rows, P + T)``: each row's learner line and ``z``, then its prompt's tokens, left-padded together, then
        its response (the episode's last ``T`` columns, right-padded)."""
        T, B = ep.response_width, ep.num_conversations
        ids, mask = ep.input_ids, ep.attention_mask
        own = self.identity[name]
        prompts = [torch.tensor(own + private[r % B], dtype=ids.dtype) for r in range(ids.shape[0])]
        prompts = [torch.cat([z, row[:-T][m[:-T].bool()]]) for z, row, m in zip(prompts, ids, mask)]
        P = max(len(p) for p in prompts)
        window = getattr(getattr(self.critic.lm, "config", None), "max_position_embeddings", None)
        if isinstance(window, int) and P + T > window:
            raise ValueError(
                f"the critic's input (the learner's name and the private fields, then a prompt and its answer) has "
                f"{P + T} tokens, past the model's {window} positions: shorten the private fields or the prompts, "
                f"or lower --context-length"
            )
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        out = torch.full((ids.shape[0], P + T), pad, dtype=ids.dtype)
        out_mask = torch.zeros_like(out, dtype=mask.dtype)
        for r, p in enumerate(prompts):
            out[r, P - len(p) : P], out_mask[r, P - len(p) : P] = p, 1
        out[:, P:], out_mask[:, P:] = ids[:, -T:], mask[:, -T:]
        return out.to(self.device), out_mask.to(self.device)

    def values(self, ids: torch.Tensor, attn: torch.Tensor, T: int, grad: bool) -> torch.Tensor:
        """The critic's outputs ``(rows, T)`` before each response token, float32 (normalised with --value-norm)."""
        with torch.set_grad_enabled(grad), torch.autocast(self.device.type, torch.bfloat16, enabled=self.config.bf16):
            return self.critic(**response_inputs(ids, attn, T))[1].float()

    def fit(self, batch: tuple[torch.Tensor, ...]) -> dict[str, float]:
        """The critic's update: ``critic_epochs`` passes over every agent's rows shuffled together, in minibatches
        of ``mini_batch_size`` rows (one member's default); one optimizer step per minibatch. Returns the mean
        value loss and the fraction of clipped values."""
        c, losses, clipped = self.config, [], []
        ids, attn, old, returns, mask = batch
        rows, T = returns.shape
        size = c.mini_batch(rows // max(len(self.members), 1))
        self.critic.train()
        try:
            for _ in range(c.critic_epochs):
                order = torch.randperm(rows, generator=self.generator).to(self.device)
                for idx in order.split(size):
                    values = self.values(ids[idx], attn[idx], T, grad=True)
                    loss, info = value_loss(values, old[idx], returns[idx], mask[idx], c.cliprange_value)
                    self.steps.backward(loss)
                    self.steps.step()
                    losses.append(loss.item())
                    clipped.append(float(info["vf_clipfrac"]))
        finally:
            self.critic.eval()
        return {"value_loss": float(np.mean(losses)), "value_clipfrac": float(np.mean(clipped))}

    def state_dict(self) -> dict[str, Any]:
        weights = {n: p.detach().clone() for n, p in self.critic.named_parameters() if p.requires_grad}
        state = {"critic": weights, "optimizer": self.steps.state_dict(), "generator": self.generator.get_state()}
        return state if self.value_norm is None else {**state, "value_norm": self.value_norm.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = (n for n, p in self.critic.named_parameters() if p.requires_grad)
        load_weights(self.critic, state["critic"], expected, self.steps)
        self.steps.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        if self.value_norm is not None:
            self.value_norm.load_state_dict(state["value_norm"])


def pooled(batches: list[tuple[torch.Tensor, ...]], pad: int) -> tuple[torch.Tensor, ...]:
    """Every member's ``(ids, attention, old, returns, mask)`` as one batch: the inputs padded to the widest
    prompt part (on the left) and response (on the right), so that rows of every role can share a minibatch."""
    T = max(b[3].shape[1] for b in batches)
    P = max(b[0].shape[1] - b[3].shape[1] for b in batches)
    out: list[list[torch.Tensor]] = [[], [], [], [], []]
    for ids, attn, old, returns, mask in batches:
        t, p = returns.shape[1], ids.shape[1] - returns.shape[1]
        out[0].append(torch.nn.functional.pad(ids, (P - p, T - t), value=pad))
        out[1].append(torch.nn.functional.pad(attn, (P - p, T - t), value=0))
        for k, x in enumerate((old, returns, mask), start=2):
            out[k].append(torch.nn.functional.pad(x, (0, T - t), value=0))
    return tuple(torch.cat(parts) for parts in out)


def build_critic(model: Any) -> CausalLMWithValueHead:
    """The critic: a trainable copy of ``model`` (the run's causal LM, freshly loaded) with a zero value head."""
    disable_dropout(model)
    return CausalLMWithValueHead(model.requires_grad_(True)).eval()
