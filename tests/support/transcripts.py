"""Transcripts of one episode played by an actor: what the decode paths (eager, static cache, compiled) must
agree on, token for token (tests/agents/acting/test_static_decode.py, the model matrix of
tests/agents/training/test_supported_models.py)."""

from __future__ import annotations

import numpy as np

from cory_agents.acting.actor import LMActor
from cory_env import env

PROMPTS = ["the movie was", "the plot is", "acting is very", "good good bad"]
CONTEXT, TURN = 40, 8


def play(model, tokenizer, actor: LMActor, seed: int = 0) -> tuple[list[str], list[np.ndarray]]:
    """One batched episode of two turns with ``actor`` for both agents: each turn's responses and response ids."""
    game = env(
        tokenizer=tokenizer,
        prompts=PROMPTS,
        reward_fn=lambda queries, responses, **_: [0.0] * len(responses),
        num_conversations=4,
        max_new_tokens=(3, TURN),
        context_length=CONTEXT,
    )
    game.reset(seed=seed)
    texts, ids = [], []
    for agent in game.agent_iter():
        observation, _, done, truncated, info = game.last()
        if done or truncated:
            texts.append(list(info["response"]))
            turn = game.played_turns(agent)[0]
            ids.append(turn.input_ids[:, -turn.response_width :] * turn.attention_mask[:, -turn.response_width :])
            game.step(None)
        else:
            game.step(actor.act(agent, observation))
    return texts, ids
