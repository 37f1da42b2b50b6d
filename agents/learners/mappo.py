"""MAPPO: multi-agent PPO with a centralised critic (Yu et al., NeurIPS 2022), a team learner over PPO members.

Each agent ``i`` keeps its own policy and learns with PPO's clipped loss; the value function is one
critic ``V_phi``, shared by every agent, that reads the **global state**: at agent ``i``'s token ``t``::

    s^i_t = (z, x^i, y^i_{<t})

``z`` every agent's private information (the task's private fields, ``name: value`` lines: the
signalling game's secret, which only the sender sees), ``x^i`` the agent's prompt (the query and the
earlier answers), ``y^i_{<t}`` its answer so far. In this chain the rest of every earlier agent's
context is already in ``x^i``, and a later agent's context does not exist yet; so ``z`` is what the
critic sees that the agent cannot. (A game without private fields leaves ``z`` empty: the critic is
then a value model of its own, shared by the agents, apart from their policies.) With ``r^i_t`` the
member's per-token reward (its KL penalty ``-beta_i KL^i_t``, plus the collective reward at its
answer's last token, as in PPO)::

    delta^i_t = r^i_t + gamma V(s^i_{t+1}) - V(s^i_t)        (V = 0 after the agent's last token)
    A^i_t     = sum_l (gamma lam)^l delta^i_{t+l}            GAE, across an agent's turns over rounds
    G^i_t     = A^i_t + V_old(s^i_t)                         the critic's target

Each member learns from ``A^i`` (whitened there) with its own value head left out (no value loss);
then the critic minimises PPO's clipped value loss over every agent's tokens, ``ppo_epochs`` passes
of shuffled minibatches of each agent's conversations::

    L(phi) = 1/2 mean_t max((V_phi(s_t) - G_t)^2, (clip(V_phi(s_t), V_old - eps_v, V_old + eps_v) - G_t)^2)

The critic is the run's model with a zero-initialised value head (the members' own learn nothing),
trained with ``--value-lr`` (``--lr`` if 0), owned by the team: placed, synchronised and saved by the
trainer (:class:`~cory_agents.learners.team.TeamRun`). Not done here: MAPPO's value normalisation
(PopArt) and parameter sharing between the policies (each agent here is its own model, as in CORY).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from cory_agents.algorithms.advantages import explained_variance, gae_over_turns
from cory_agents.algorithms.losses import value_loss
from cory_agents.learners.base import Episode, load_weights
from cory_agents.learners.dropout import disable_dropout
from cory_agents.learners.lm import response_inputs
from cory_agents.learners.ppo import PPOConfig, PPOLearner
from cory_agents.learners.team import TeamEpisode, TeamRun
from cory_agents.learners.value_model import CausalLMWithValueHead

#: The critic's minibatch order: a random stream apart from the members' (seeded with the run's seed too).
CRITIC_STREAM = 2


@dataclass(kw_only=True)
class MAPPOConfig(PPOConfig):
    """``--learner mappo``: PPO's settings, for each member and for the critic (``value_lr``, ``cliprange_value``)."""

    _argument_group_name: ClassVar[str] = "Learner mappo: PPO members, one centralised critic over the global state"


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

    def learn(self, team: TeamEpisode) -> dict[str, dict[str, float]]:
        c = self.config
        private = self.private_information(team)
        stats: dict[str, dict[str, float]] = {}
        batches = []  # (critic inputs, old values, returns, mask) of each member's rows
        for name in team.order:
            ep = team.episodes[name]
            ids, attn = self.critic_inputs(ep, private)
            old_values = self.values(ids, attn, ep.response_width, grad=False)
            kept: dict[str, torch.Tensor] = {}

            def estimate(rewards: torch.Tensor, mask: torch.Tensor, ep: Episode = ep, values=old_values, kept=kept):
                values = values.to(rewards.device) * mask
                advantages, kept["returns"] = gae_over_turns(rewards, values, mask, ep.turns, c.gamma, c.lam)
                kept["mask"] = mask
                return advantages

            stats[name] = self.members[name].learn(ep, advantages=estimate)
            returns, mask = kept["returns"].to(self.device), kept["mask"].to(self.device)
            ev = explained_variance(old_values * mask, returns, mask)
            stats[name]["critic_explained_variance"] = float(team.data_parallel.mean({"ev": float(ev)})["ev"])
            batches.append((ids, attn, old_values * mask, returns, mask))
        stats["critic"] = team.data_parallel.mean(self.fit(batches))
        return stats

    def private_information(self, team: TeamEpisode) -> list[list[int]]:
        """``z`` of each conversation, in the critic's tokens: every private field as a ``name: value`` line
        (none: empty)."""
        env = team.env
        fields = sorted(getattr(env.turn_prompts, "private_fields", {}) or {}) if env is not None else []
        if not fields:
            return [[] for _ in range(next(iter(team.episodes.values())).num_conversations)]
        texts = ["".join(f"{f}: {p.metadata[f]}\n" for f in fields) for p in env.prompts]
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def critic_inputs(self, ep: Episode, private: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rows, P + T)``: each row's ``z`` then its prompt's tokens, left-padded together, then its response
        (the episode's last ``T`` columns, right-padded)."""
        T, B = ep.response_width, ep.num_conversations
        ids, mask = ep.input_ids, ep.attention_mask
        prompts = [torch.tensor(private[r % B], dtype=ids.dtype) for r in range(ids.shape[0])]
        prompts = [torch.cat([z, row[:-T][m[:-T].bool()]]) for z, row, m in zip(prompts, ids, mask)]
        P = max(len(p) for p in prompts)
        window = getattr(getattr(self.critic.lm, "config", None), "max_position_embeddings", None)
        if isinstance(window, int) and P + T > window:
            raise ValueError(
                f"the critic's input (the private fields, then a prompt and its answer) has {P + T} tokens, past the "
                f"model's {window} positions: shorten the private fields or the prompts, or lower --context-length"
            )
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        out = torch.full((ids.shape[0], P + T), pad, dtype=ids.dtype)
        out_mask = torch.zeros_like(out, dtype=mask.dtype)
        for r, p in enumerate(prompts):
            out[r, P - len(p) : P], out_mask[r, P - len(p) : P] = p, 1
        out[:, P:], out_mask[:, P:] = ids[:, -T:], mask[:, -T:]
        return out.to(self.device), out_mask.to(self.device)

    def values(self, ids: torch.Tensor, attn: torch.Tensor, T: int, grad: bool) -> torch.Tensor:
        """``V(s_t)`` ``(rows, T)`` before each response token, float32."""
        with torch.set_grad_enabled(grad), torch.autocast(self.device.type, torch.bfloat16, enabled=self.config.bf16):
            return self.critic(**response_inputs(ids, attn, T))[1].float()

    def fit(self, batches: list[tuple[torch.Tensor, ...]]) -> dict[str, float]:
        """The critic's update: ``ppo_epochs`` passes, each member's rows in shuffled minibatches; one optimizer
        step per minibatch. Returns the mean value loss and the fraction of clipped values."""
        c, losses, clipped = self.config, [], []
        self.critic.train()
        try:
            for _ in range(c.ppo_epochs):
                for ids, attn, old, returns, mask in batches:
                    rows, T = returns.shape
                    order = torch.randperm(rows, generator=self.generator).to(self.device)
                    for idx in order.split(c.mini_batch(rows)):
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
        return {"critic": weights, "optimizer": self.steps.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = (n for n, p in self.critic.named_parameters() if p.requires_grad)
        load_weights(self.critic, state["critic"], expected, self.steps)
        self.steps.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])


def build_critic(model: Any) -> CausalLMWithValueHead:
    """The critic: a trainable copy of ``model`` (the run's causal LM, freshly loaded) with a zero value head."""
    disable_dropout(model)
    return CausalLMWithValueHead(model.requires_grad_(True)).eval()
