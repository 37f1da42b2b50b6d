"""# Pioneer → Observer

Text generation as a sequential game of a chain of agents (CORY, Ma et al., NeurIPS 2024: two).

| Import               | `from cory_env import env` or `pettingzoo.make("aec", "cory/PioneerObserver-v0")` |
|----------------------|-----------------------------------------------------------------------------------|
| Parallel API         | `cory_env.parallel_env(...)`, `cory_env.to_parallel(aec)` (PettingZoo's turn-based) |
| Actions              | Discrete (one token id); MultiDiscrete (one per conversation) in the batched form |
| Agents               | `["pioneer", "observer"]`; `num_agents=N`: `["pioneer", "observer_1", ...]`        |
| Action shape         | `()`, or `(B,)` with `num_conversations=B`                                          |
| Action values        | token ids in `[0, vocab_size)` (each agent's own vocabulary in a team of models)   |
| Observation shape    | Dict of Box: `input_ids`, `attention_mask` `(L,)` or `(B, L)`; scalars `(1,)`      |
| Rewards              | each agent's task reward of its response, at the end of the episode              |
| Rounds               | `rounds=R`: the chain plays `R` times (default 1); see "Games of several rounds"  |

The **pioneer** answers the query; the **observer** answers the same query with the
pioneer's answer in its prompt (knowledge transfer). One `step` is one token. A turn
ends at a stop token (EOS) or after `max_new_tokens`; the episode ends after the
observer's turn, and then both agents are terminated (step them with `None`, as usual).

### Chains of N agents, teams of different models

With `num_agents=N` agent `k` answers the query with the earlier answers in its prompt: its
template (`templates`, one per agent, or `observer_template` for every later agent) names them
as `{response}` (the previous agent's), `{response_1}` ... `{response_{k-1}}` or `{responses}`
(all, one per line; :mod:`cory_env.templates`). The default chain has each agent improve the
answer before it. A template naming an answer that does not exist at its position fails when
the environment is made.

`tokenizer` may be a list, one per agent: a team of different models. Each agent's context is
then rendered from the earlier agents' decoded text and tokenized with its own tokenizer, and
its action space is its own vocabulary (`speaker(agent)`, `tokenizers`, `heterogeneous`); one
shared tokenizer is the fast path. :class:`~cory_env.RoleExchangeWrapper` rotates learners
through the positions and seats each one's tokenizer with it.

### Games of several rounds, private fields, turn rewards

With `rounds=R` the chain plays `R` times: the turns go pioneer, observer, ... in round 1, then
the same order again, `R * N` turns in all. What each part of the API does then:

| API                      | with `rounds=R`                                                                     |
|--------------------------|-------------------------------------------------------------------------------------|
| AEC order, `agent_iter`  | the positions in order, round after round; each agent acts once per token of its turns |
| observations             | a fresh context at each of the agent's turns (`past_length == 0` at its start); in chat form a later turn carries the earlier ones ([Chat models](chat.md)) |
| templates                | `templates[k]` a template (every round) or a list of `R`; without it, later rounds use `later_templates` (one per position) or `observer_template` at every position: each agent revises after reading the turn before |
| fields                   | `{response_k_j}` (agent `k`, round `j`), `{round}`, `{response_k}` (agent `k`'s latest), `{response}` (the previous turn), `{responses}` (every earlier turn: the transcript) |
| rewards                  | the reward scores every turn; an agent receives its turns' scores summed at the episode end, or each at its turn's end with `turn_rewards=True` (AEC per-step rewards) |
| `infos[agent]`           | the latest turn's `context`, `response`, `task_reward`, and `round` (0-based)       |
| `played_turns(agent)`    | the agent's finished turns: prompt and response tokens, task reward, reward received (a learner's episode) |
| `history`, `round`       | the turns played so far, `(position, round, answers)`; the round being played (0-based) |
| `state()`                | every position's current context (its latest turn), private fields included       |
| `last_transcript`        | per role the last turn's entries, `turns` (each turn's, in order) and the summed `reward` |
| replays                  | `options={"answers": [...]}`: the first `k < N * R` turns given, in the order played |
| `CollectiveRewardWrapper`| per episode: every agent the sum over agents and turns; with `turn_rewards`, each round's sum at the round's end |
| `RoleExchangeWrapper`    | rotates the learners between episodes, never within one                             |

A prompt row's fields (a :class:`~cory_env.prompts.Prompt`'s metadata, such as a signalling
game's `secret`) may be named in templates (`prompt_fields`, by default a prompt list's keys);
`private_fields={"secret": [0]}` lets only position 0's templates name one, so no other agent's
observation, info or context ever holds it: what it learns of the secret comes through the
earlier agents' answers. `state()` holds every agent's context, the secret included: it is the
centralised critic's view. A reward function whose signature names `round`, `position` or `earlier`
receives what it names (all three if it also takes `**kwargs`) at every turn: the round and position,
0-based, and per conversation the answers of the turns played before this one, in order (Taboo's
referee reads the sender's message when it scores the guess).

### Replays

`reset(options={"answers": [answers_0, ..., answers_{k-1}]})` (`k` lists of one string per
conversation, `0 <= k < N * R`, turns in the order played; `[]` plays every turn again) replays the last episode's queries,
with its turn limit, and the answers of the first `k` turns given: only the turns after them are
played (`agents` holds the positions with a turn left; in one round, positions `k` to `N-1`) and
turn `k`'s prompt is rendered from the given answers. Nothing is drawn from the
environment's generator (unless ``seed`` is given too). A counterfactual: what the later agents
answer, and earn, when an earlier answer is another, or blank
(:class:`~cory_agents.learners.difference.DifferenceRewards`). Replays are the raw environment's:
call them on a copy of ``env.unwrapped`` (``copy.copy``), which keeps the played episode's texts;
CORY's wrappers refuse them.

### Batched form

With `num_conversations=B` the environment advances `B` conversations in lockstep:
the action is `B` token ids (one model forward serves them all). A conversation whose
turn is over ignores further tokens (they are not appended); the turn ends when every
conversation's turn is over.

### Observations

`observe(agent)` gives the agent's own context, left-padded to the fixed width
`L = context_length`, newest token in the last column:

| key              | shape            | meaning                                                     |
|------------------|------------------|-------------------------------------------------------------|
| `input_ids`      | `(L,)`/`(B, L)`  | context token ids (prompt, then the response so far)        |
| `attention_mask` | `(L,)`/`(B, L)`  | 1 for real tokens, 0 for padding (and for ignored tokens)   |
| `past_length`    | `(1,)`           | trailing columns before the new ones that a KV cache built  |
|                  |                  | over this turn already holds; 0 at the start of a turn (in  |
|                  |                  | chat form, a later turn's: the agent's earlier turn's, less |
|                  |                  | its last token, never fed)                                  |
| `num_new_tokens` | `(1,)`           | trailing columns new since the agent's previous step: the   |
|                  |                  | whole prompt at the start of a turn, then 1                  |
| `role`           | `(1,)`           | the chain position: 0 for pioneer, 1 for observer, ...      |

A policy with a KV cache feeds `input_ids[..., -num_new_tokens:]` with the mask
`attention_mask[..., -(past_length + num_new_tokens):]` (positions counted over that mask: a carried
context has masked columns inside it), and starts a fresh cache when `past_length == 0` (the layout:
:mod:`cory_env.context`; a turn starts where `past_length == 0` or `num_new_tokens > 1`:
:func:`~cory_env.context.starts_turn`).

### Global state

`state()` (and `state_space`) is a centralized critic's view: every role's context window,
`(B, R, L)` token ids (`(R, L)` unbatched), `-1` where that role's observation is masked
(PettingZoo's `state_test` passes; the parallel API forwards it).

### Rewards and infos

A reward function `(queries, responses, **metadata) -> list[float]` scores each
agent's responses when its turn ends (metadata comes from the prompts). Rewards are
delivered at the end of the episode (with several rounds: each agent's turns summed), or with
`turn_rewards=True` each turn's at that turn's end. PettingZoo rewards are scalars, so in the batched
form `rewards[agent]` (and `last()`'s reward) is the **mean over conversations**; the
per-conversation values are in `infos[agent]["reward"]`.

`infos[agent]` always has `role`; when the agent's turn ends it gains `query`,
`context` (the text it was prompted with), `response` (decoded, without special
tokens), `response_length` and `task_reward` (its own score); at the episode end
`reward` (what it receives: its task reward here, the collective reward under
:class:`~cory_env.CollectiveRewardWrapper`). In the batched form these are lists or
arrays over conversations.

### Numeric infos (for TorchRL and other tensor-based clients)

Libraries that turn every info into a tensor of a fixed shape (TorchRL's
`PettingZooWrapper` builds its info spec from the infos `reset` returns) need the same
numeric keys, with the same shapes, at every step. `numeric_infos=True` gives them: from
`reset` on, `infos[agent]` is

| key               | shape       | value                                                          |
|-------------------|-------------|----------------------------------------------------------------|
| `role`            | `()`        | the chain position: 0 for pioneer, 1 for observer (int64)      |
| `response_length` | `()`/`(B,)` | tokens of the agent's response; 0 until its turn ends (int64)  |
| `task_reward`     | `()`/`(B,)` | its own score; 0 until its turn ends (float64)                 |
| `reward`          | `()`/`(B,)` | what it receives, per conversation; 0 until the episode ends   |

The texts are then not in the infos. :attr:`~PioneerObserverEnv.last_transcript` (in any
mode, kept through `reset`, so readable after a client has already started the next
episode) holds what the default infos held at the end of the last finished episode, by
role: `role`, `query`, `context`, `response`, `response_length`, `task_reward`, `reward`.
Where to read it:

| API                                                    | the last finished episode's texts                        |
|--------------------------------------------------------|----------------------------------------------------------|
| AEC: `env(...)`, CORY's wrappers around it             | `env.last_transcript` or `env.unwrapped.last_transcript` |
| parallel: `parallel_env(...)`, `to_parallel(aec)`      | `par.last_transcript` (from the AEC environment)         |
| PettingZoo's `turn_based_aec_to_parallel(aec)`         | `par.unwrapped.last_transcript`                          |
| TorchRL: `PettingZooWrapper(env=...)`, either API      | `env.last_transcript` (TorchRL forwards it)              |
| Tianshou: `PettingZooEnv(aec)` (`unwrapped` is itself) | `ts_env.env.last_transcript`                             |
| Tianshou: a `DummyVectorEnv` of those                  | `[e.last_transcript for e in venv.get_env_attr("env")]`  |

:func:`parallel_env` and :func:`to_parallel` also make the parallel API's `active_agent`
numeric under `numeric_infos` (PettingZoo's conversion writes the agent's name).

### Arguments

- `tokenizer`: a Hugging Face tokenizer, or a list of one per agent (a team of different
  models); `None` loads the embedded default's (`smollm2-135m`).
- `prompts`: a :class:`~cory_env.prompts.PromptSource` or a list of strings; `None`
  gives movie-review prefixes (IMDB when available, Rotten Tomatoes offline).
- `reward_fn`: batched reward function; `None` gives VADER sentiment.
- `num_conversations`: `None` for the single form, `B` for the batched form.
- `max_new_tokens`: int, or `(low, high)` to sample the limit per episode (paper: 4-15).
- `context_length`: observation width `L`; each prompt plus `max_new_tokens` must fit.
- `pioneer_template`, `observer_template`: see :mod:`cory_env.templates`; in a longer chain
  every later agent uses `observer_template`.
- `knowledge_transfer`: `False` gives every later agent the pioneer's prompt (the paper's ablation).
- `with_observer`: `False` leaves the pioneer alone (single-agent PPO, the paper's baseline).
- `num_agents`: agents in the chain (default 2, or 1 without the observer).
- `templates`: one template per agent (overrides `pioneer_template` and `observer_template`).
- `stop_token_ids`: tokens that end a turn; default: the tokenizer's EOS (each agent's own).
- `vocab_size`: action-space size; default `len(tokenizer)`. Both also take one value per agent.
- `numeric_infos`: `True` gives infos with fixed numeric keys from `reset` on (see above).
- `rounds`: times the chain plays (default 1); `later_templates`: one template per position for
  the rounds after the first.
- `prompt_fields`, `private_fields`: the prompt rows' fields templates may name, and those only
  some positions may (`{field: positions}`).
- `turn_rewards`: `True` rewards every turn at its end instead of the turns' sum at the episode end.

### Bad input

Token ids that are not integers, or are out of range, raise with the offending id (a
client whose policy returns floats, as Tianshou's `RandomActionPolicy` does, casts first:
`int(action)`, or `np.asarray(actions).astype(np.int64)` in the batched form); a
non-`None` action for a terminated agent, or a step after the episode ended, raises
and says to `reset()`; a template naming an answer not there yet at its position, or a
list of tokenizers that is not one per agent, raises when the environment is made, as does `rounds` below 1, a template naming a turn not yet
played (`{response_2_2}` in the pioneer's second turn) or a private field its position may not
see; a prompt row without a field a template names raises naming the row and the field; a
prompt that does not fit the context (with the earlier answers its template names) raises
:class:`PromptTooLongError`; a reward function that raises or returns a wrong number of
values, non-finite values or values that are not real numbers raises
:class:`~cory_env.rewards.RewardFunctionError`.

### Version history

- v0 (cory-env 0.1 to 0.3): the environment described here. cory-env 0.2 refuses rewards that
  are not real numbers (bools, strings, None: 0.1 converted `"0.5"` to 0.5) and limits a reward
  call to `--reward-timeout` in the trainer; 0.3 adds the `answers` option of `reset` (a replay of
  the last episode with the first answers given), which earlier versions ignored, and rounds,
  prompt and private fields and turn rewards, all off by default. With valid
  input every argument behaves as in 0.1, so the id stays `cory/PioneerObserver-v0`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.utils import seeding
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import AgentSelector

from cory_env.chat_prompts import ChatForm, chat_form, game_prompts
from cory_env.context import (
    PlayedTurn,
    PromptTooLongError,  # noqa: F401 (raised by reset and check_prompts; exported from here)
    Turn,
    check_context_length,
    empty_context,
    new_token_range,
)
from cory_env.episode_record import EpisodeRecord
from cory_env.parallel import to_parallel
from cory_env.prompts import (
    Prompt,
    PromptList,
    PromptSource,
    as_prompt,
    as_prompt_source,
    metadata_lists,
)
from cory_env.rewards.base import RewardFunction, score_responses, told_turn, turn_keywords
from cory_env.spaces import agent_spaces, as_token_ids, state_space
from cory_env.speakers import Speaker, check_seating, make_speakers
from cory_env.templates import (  # noqa: F401 (OBSERVER, ROLES: the chain's names, exported from here)
    OBSERVER,
    PIONEER,
    ROLES,
    SENTIMENT_OBSERVER,
    SENTIMENT_PIONEER,
    Template,
    chain_roles,
    check_rounds,
    given_answers,
    transcript_text,
)
from cory_env.wrappers.order_enforcing import OrderEnforcingWrapper


# The entry points first, as in PettingZoo's own environments; raw_env (the unwrapped class)
# is PioneerObserverEnv, named right after it.
def env(**kwargs: Any) -> AECEnv:
    """The environment with order enforcing (the usual entry point): :class:`OrderEnforcingWrapper`
    around ``raw_env(**kwargs)``."""
    return OrderEnforcingWrapper(raw_env(**kwargs))


def parallel_env(**kwargs: Any) -> ParallelEnv:
    """The environment through PettingZoo's parallel API.

    ``to_parallel(env(**kwargs))``, PettingZoo's ``turn_based_aec_to_parallel``: every agent
    is live for the whole episode, but each ``step`` uses only the action of the agent whose
    turn it is (``infos[agent]["active_agent"]`` after a step; the pioneer acts first). The last
    finished episode's texts are ``par.last_transcript``. To add wrappers, wrap the AEC
    environment and convert it with :func:`to_parallel` (docs/other-algorithms.md).
    """
    return to_parallel(env(**kwargs))


class PioneerObserverEnv(AECEnv):
    metadata = {
        "name": "cory/PioneerObserver-v0",
        "render_modes": ["human", "ansi"],
        "is_parallelizable": False,
    }

    def __init__(
        self,
        tokenizer: Any = None,
        prompts: PromptSource | Sequence[str] | None = None,
        reward_fn: RewardFunction | None = None,
        *,
        num_conversations: int | None = None,
        max_new_tokens: int | tuple[int, int] = 16,
        context_length: int = 256,
        pioneer_template: Template = SENTIMENT_PIONEER,
        observer_template: Template = SENTIMENT_OBSERVER,
        knowledge_transfer: bool = True,
        with_observer: bool = True,
        num_agents: int | None = None,
        templates: Sequence[Template] | None = None,
        stop_token_ids: Sequence[int] | Sequence[Sequence[int]] | None = None,
        vocab_size: int | Sequence[int] | None = None,
        numeric_infos: bool = False,
        render_mode: str | None = None,
        rounds: int = 1,
        later_templates: Sequence[Template] | None = None,
        prompt_fields: Sequence[str] | None = None,
        private_fields: Mapping[str, Sequence[int]] | None = None,
        turn_rewards: bool = False,
        chat: ChatForm | bool | None = None,
    ):
        super().__init__()
        if num_agents is None:
            num_agents = 2 if with_observer else 1
        elif not with_observer and num_agents != 1:
            raise ValueError(f"with_observer=False is a chain of one agent, but num_agents={num_agents!r}: give one")
        roles = chain_roles(num_agents)
        if tokenizer is None:
            from cory_env.models import load_tokenizer

            tokenizer = load_tokenizer()
        self._speakers: list[Speaker] = make_speakers(tokenizer, len(roles), vocab_size, stop_token_ids)
        first = self._speakers[0]
        if prompts is None:
            from cory_env.tasks.sentiment import sentiment_prompts

            prompts = sentiment_prompts(first.tokenizer)
        if reward_fn is None:
            from cory_env.rewards.sentiment import vader_sentiment

            reward_fn = vader_sentiment
        if not callable(reward_fn):
            raise TypeError(f"reward_fn must be callable (queries, responses, **metadata), got {reward_fn!r}")
        if num_conversations is not None and (
            isinstance(num_conversations, bool) or not isinstance(num_conversations, int) or num_conversations < 1
        ):
            raise ValueError(f"num_conversations must be a positive int or None, got {num_conversations!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        if not isinstance(numeric_infos, bool):
            raise TypeError(f"numeric_infos must be True or False, got {numeric_infos!r}")
        if not isinstance(turn_rewards, bool):
            raise TypeError(f"turn_rewards must be True or False, got {turn_rewards!r}")
        self.rounds = check_rounds(rounds)

        self.prompt_source = as_prompt_source(prompts)
        #: The chat form the game is played in (:mod:`cory_env.chat_prompts`), or ``None``: the raw form.
        self.chat = chat_form(chat, self.prompt_source)
        self.reward_fn = reward_fn
        self.batched = num_conversations is not None
        self.num_conversations = num_conversations or 1
        self.max_new_tokens_range = new_token_range(max_new_tokens)
        self.context_length = int(context_length)
        #: How each turn is prompted: :class:`~cory_env.turn_prompts.TurnPrompts` (its template, ``[round][position]``),
        #: or in chat form :class:`~cory_env.chat_prompts.ChatPrompts` (each agent's view of the conversation).
        self.turn_prompts = game_prompts(
            self.chat,
            roles,
            templates,
            pioneer_template,
            observer_template,
            knowledge_transfer,
            rounds=self.rounds,
            later_templates=later_templates,
            prompt_source=self.prompt_source,
            prompt_fields=prompt_fields,
            private_fields=private_fields,
        )
        if self.chat is not None and stop_token_ids is None:  # a turn ends at each template's end of turn (or EOS)
            ends = self.turn_prompts.end_of_turn_ids([s.tokenizer for s in self._speakers])
            self._speakers = make_speakers(tokenizer, len(roles), vocab_size, ends)
        self.round_templates = getattr(self.turn_prompts, "table", None)  # the raw form's templates; None in chat form
        self.templates = self.round_templates[0] if self.round_templates else None
        self.turn_rewards = turn_rewards
        self._reward_turn_keywords = turn_keywords(reward_fn)
        chain = self.templates or [None, None]  # the pioneer's and observer's templates (raw form)
        self.pioneer_template, self.observer_template = chain[0], chain[1] if len(roles) > 1 else observer_template
        self.knowledge_transfer = knowledge_transfer
        self.numeric_infos = numeric_infos
        self._last_transcript: dict[str, dict[str, Any]] | None = None
        self.render_mode = render_mode
        tokenizers = [s.tokenizer for s in self._speakers]
        check_context_length(self.context_length, self.max_new_tokens_range[1], tokenizers, roles)

        self.possible_agents = list(roles)
        self._slot = {agent: i for i, agent in enumerate(roles)}  # whose speaker sits at each position
        B, L, batched = self.num_conversations, self.context_length, self.batched
        # One observation and action space per agent; an agent seated at another position (a team of
        # different models under role exchange) brings its own.
        self.agent_spaces = agent_spaces(self._speakers, B, L, batched)
        self.state_space = state_space(self._speakers, B, L, batched)
        self._role_arrays = {a: _frozen(np.array([i], dtype=np.int64)) for i, a in enumerate(roles)}
        self._empty_contexts = {s: empty_context(s.pad_token_id, B, L) for s in self._speakers}

    # Agent 0's (the first learner's) tokens; each agent's own are in its speaker, self.speaker(agent).
    tokenizer = property(
        lambda self: self._speakers[0].tokenizer,
        doc="Agent 0's tokenizer (every agent's, unless the team is of different models: :attr:`tokenizers`).",
    )
    vocab_size = property(lambda self: self._speakers[0].vocab_size, doc="Agent 0's vocabulary size.")
    pad_token_id = property(lambda self: self._speakers[0].pad_token_id, doc="Agent 0's padding token.")
    stop_token_ids = property(lambda self: self._speakers[0].stop_token_ids, doc="The tokens that end agent 0's turn.")

    @property
    def seating(self) -> list[int]:
        """Which agent's speaker plays each chain position (identity unless ``reset(options={"seating": ...})``)."""
        return [self._slot[a] for a in self.possible_agents]

    @property
    def tokenizers(self) -> list[Any]:
        """Each agent's tokenizer, in the order of ``possible_agents`` (as seated for this episode)."""
        return [self.speaker(a).tokenizer for a in self.possible_agents]

    @property
    def heterogeneous(self) -> bool:
        """Whether the agents speak different tokens (a team of different models): agents that
        share a tokenizer, vocabulary and stop tokens share one speaker."""
        return len({id(s) for s in self._speakers}) > 1

    def speaker(self, agent: str) -> Speaker:
        """The :class:`~cory_env.speakers.Speaker` (tokenizer, vocabulary, special tokens) of ``agent``'s seat."""
        return self._speakers[self._slot[agent]]

    def observation_space(self, agent: str) -> gymnasium.spaces.Dict:
        return self.agent_spaces[self._slot[agent]][0]

    def action_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.agent_spaces[self._slot[agent]][1]

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        """Start an episode. ``options={"seating": [i_0, ..., i_{N-1}]}`` seats agent ``i_k``'s
        speaker (tokenizer, vocabulary) at position ``k`` for this and later episodes (a
        permutation; :class:`~cory_env.RoleExchangeWrapper` rotates a team of different models so).
        ``options={"answers": [...]}`` replays the last episode (module docstring: "Replays")."""
        given = given_answers(
            (options or {}).get("answers"), self.possible_agents, self.num_conversations, self.batched, self.rounds
        )
        replaying = (options or {}).get("answers") is not None
        if replaying and not hasattr(self, "queries"):
            raise RuntimeError("reset(options={'answers': ...}) replays the last episode's queries: play one first")
        if options and "seating" in options:
            seating = check_seating(options["seating"], len(self.possible_agents))
            self._slot = dict(zip(self.possible_agents, seating))  # one lookup per token step
        if seed is not None or not hasattr(self, "np_random"):
            self.np_random, self.np_random_seed = seeding.np_random(seed)
        B, N = self.num_conversations, len(self.possible_agents)
        # The agents with a turn still to play (in a replay of one round: the positions after the given ones).
        self.agents = [a for p, a in enumerate(self.possible_agents) if (self.rounds - 1) * N + p >= len(given)]
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: self._initial_info(a) for a in self.agents}
        self._agent_selector = AgentSelector(self.agents)
        self.agent_selection = self._agent_selector.reset()
        self._skip_agent_selection = None

        if not replaying:  # a replay keeps the last episode's turn limit and queries
            lo, hi = self.max_new_tokens_range
            self.max_new_tokens = int(self.np_random.integers(lo, hi + 1))
            self.prompts: list[Prompt] = list(self.prompt_source.sample(self.np_random, B))
            if len(self.prompts) != B:
                raise ValueError(f"prompt source returned {len(self.prompts)} prompts for {B} conversations")
            self.queries = [p.query for p in self.prompts]
            self._metadata = metadata_lists(self.prompts)  # reward-function keyword lists, once per episode
        self.task_rewards: dict[str, np.ndarray] = {}
        self.responses: dict[str, list[str]] = {}
        #: This episode's turns, their rewards and transcript (:class:`~cory_env.episode_record.EpisodeRecord`).
        self.record = EpisodeRecord(self.agents, self.rounds, self.batched)
        for i, answers in enumerate(given):
            self.responses[self.possible_agents[i % N]] = answers
            self.record.history.append((i % N, i // N, answers))
        self._turns: dict[str, Turn] = {}
        self._turn_ended: str | None = None
        self.round = len(given) // N
        self.episode_over = False

        position = len(given) % N
        self._start_turn(self.possible_agents[position], self._turn_texts(position))
        self.agent_selection = self.possible_agents[position]
        # A later turn's prompt grows with the earlier answers: check the worst case now
        # rather than fail in the middle of the episode.
        tokenizers = [self.speaker(a).tokenizer for a in self.possible_agents]
        self.turn_prompts.check_episode(self.prompts, tokenizers, self.context_length, self.max_new_tokens)

    def _turn_texts(self, position: int) -> list[str]:
        """The prompts of ``position``'s turn in the current round, from the turns played so far (in chat form
        rendered by its seat's chat template)."""
        tokenizer = self.speaker(self.possible_agents[position]).tokenizer
        return self.turn_prompts.texts(position, self.round, self.prompts, self.record.history, tokenizer=tokenizer)

    def check_prompts(self, prompts: Sequence[Prompt | str] | None = None) -> None:
        """Check that every prompt fits the context with the longest responses (``max_new_tokens``'
        upper end, for a later agent also the earlier answers its template names), instead of at
        the episode that draws one; in a team of different models, in every agent's tokens.

        ``prompts`` defaults to the whole prompt source when it is a list (:class:`PromptList`);
        other sources are not enumerated. Raises :class:`PromptTooLongError` naming how many do
        not fit, the longest, and the ``context_length`` that would hold them all.
        """
        if prompts is None:
            if not isinstance(self.prompt_source, PromptList):
                return
            prompts = self.prompt_source.prompts
        rows = [as_prompt(p) for p in prompts]
        tokenizers = list({id(s.tokenizer): s.tokenizer for s in self._speakers}.values())  # any may sit anywhere
        self.turn_prompts.check_all(rows, tokenizers, self.context_length, self.max_new_tokens_range[1])

    def _start_turn(self, role: str, texts: list[str]) -> None:
        """Tokenize the role's prompts and lay them out for its turn (:class:`~cory_env.context.Turn`); in chat form
        a later turn of the role continues its last one where the view only grew (:mod:`cory_env.chat_prompts`)."""
        speaker, L, T = self.speaker(role), self.context_length, self.max_new_tokens
        previous = self._turns.get(role) if self.chat is not None and self.chat.carry else None
        turn = self.round * len(self.possible_agents) + self.possible_agents.index(role)
        self._turns[role] = self.turn_prompts.start_turn(texts, speaker, turn, L, T, previous, self.responses.get(role))

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        turn = self._turns.get(agent)
        if turn is None:  # before its turn
            (ids, mask), past, new = self._empty_contexts[self.speaker(agent)], 0, 0
        else:
            (ids, mask), past, new = turn.window(), turn.past_length, turn.num_new_tokens
        if not self.batched:
            ids, mask = ids[0], mask[0]
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "past_length": np.array([past], dtype=np.int64),
            "num_new_tokens": np.array([new], dtype=np.int64),
            "role": self._role_arrays[agent],
        }

    def state(self) -> np.ndarray:
        """The global state, for centralized training (a critic that sees every role's context).

        ``(B, R, L)`` token ids (``(R, L)`` unbatched), ``R`` the roles in the order of
        ``possible_agents`` (the chain's order): each role's current context window, as its
        observation holds it (in its own tokens), with ``-1`` wherever that observation's
        attention mask is 0 (padding, and the whole row before the role's turn)."""
        if not hasattr(self, "_turns"):
            raise RuntimeError("state() before the first reset(): call reset() first")
        out = np.full((self.num_conversations, len(self.possible_agents), self.context_length), -1, dtype=np.int64)
        for i, role in enumerate(self.possible_agents):
            if (turn := self._turns.get(role)) is not None:
                out[:, i] = turn.masked_window()
        return out if self.batched else out[0]

    def step(self, action: Any) -> None:
        if not self.agents:
            raise RuntimeError("the episode is over: call reset() before step()")
        agent = self.agent_selection
        self._turn_ended = None
        if self.terminations[agent] or self.truncations[agent]:
            if action is not None:
                raise ValueError(
                    f"{agent!r} is terminated (its episode is over), so the only valid action is None, "
                    f"got {action!r}. Step finished agents with None (env.last() reports termination) "
                    f"or call reset() to start a new episode."
                )
            self._was_dead_step(action)
            return
        speaker = self.speaker(agent)
        tokens = as_token_ids(action, agent, self.num_conversations if self.batched else None, speaker.vocab_size)
        self._cumulative_rewards[agent] = 0.0
        if self.turn_rewards:  # this step's rewards: a turn's score when it ends
            self.rewards = {a: 0.0 for a in self.agents}
        if self._turns[agent].append(tokens, speaker.stop_token_ids, self.max_new_tokens):
            self._end_turn(agent)  # at the episode's end this delivers the rewards
        if self.render_mode == "human" and self.episode_over:
            self.render()

    def _end_turn(self, agent: str) -> None:
        turn, position, round = self._turns[agent], self.possible_agents.index(agent), self.round
        n = turn.response_length
        responses = self.speaker(agent).tokenizer.batch_decode(turn.response_ids(), skip_special_tokens=True)
        metadata = self._metadata
        if keys := self._reward_turn_keywords:  # a reward that scores every turn is told which one
            metadata = {**metadata, **told_turn(keys, metadata, round, position, self.record.history)}
        scores = score_responses(self.reward_fn, self.queries, responses, metadata)
        self.responses[agent] = responses
        self.task_rewards[agent] = scores
        ids, mask = turn.columns()
        played = PlayedTurn(round, position, ids, mask, turn.t, n.copy(), scores, np.zeros(self.num_conversations))
        texts: dict[str, Any] = dict(query=list(self.queries), context=turn.prompt_texts)
        if self.chat is not None:  # each conversation as the agent saw it, and its answer
            texts["messages"] = self.turn_prompts.conversations(position, self.prompts, self.record.history, responses)
        ended = self.record.add(agent, played, responses, **texts)
        if self.numeric_infos:
            self.infos[agent].update(
                response_length=self._unbatch(n.copy()), task_reward=self._unbatch(np.array(scores, dtype=np.float64))
            )
        else:
            self.infos[agent].update(ended)
        self._turn_ended = agent
        if self.turn_rewards:
            self.deliver_turn_rewards({agent: scores})
        N = len(self.possible_agents)
        following = round * N + position + 1
        if following < N * self.rounds:  # the next turn, with the earlier answers in its prompt
            k, self.round = following % N, following // N
            self._start_turn(self.possible_agents[k], self._turn_texts(k))
            self.agent_selection = self.possible_agents[k]
        else:
            self.episode_over = True
            self._last_transcript = self.record.transcript  # deliver_rewards adds the rewards to it
            if not self.turn_rewards:
                self.deliver_rewards(self.episode_task_rewards())
            self.terminations = {a: True for a in self.agents}
            self.agent_selection = self._agent_selector.reset()  # dead steps, pioneer first

    @property
    def history(self) -> list[tuple[int, int, list[str]]]:
        """The turns played so far in this episode, in order: ``(position, round, answers)`` (0-based)."""
        return self.record.history

    def episode_task_rewards(self) -> dict[str, np.ndarray]:
        """Each agent's task rewards of this episode, per conversation: its turns' scores summed
        (in one round, its only turn's)."""
        return self.record.task_totals()

    @property
    def turn_ended(self) -> str | None:
        """The agent whose turn the last step ended (``None`` if it ended none): reward wrappers
        deliver turn rewards right after that step."""
        return self._turn_ended

    def played_turns(self, agent: str) -> list[PlayedTurn]:
        """``agent``'s (a role's) finished turns of this episode, in order, with the reward each
        received (:class:`~cory_env.context.PlayedTurn`): what a learner takes from an episode of
        several rounds."""
        return list(self.record.turns.get(agent, []))

    def deliver_turn_rewards(self, rewards: Mapping[str, np.ndarray]) -> None:
        """Set what agents receive at the end of the turn just played (per conversation), each
        for its latest finished turn, replacing what this step gave them (with ``turn_rewards``:
        the acting agent's own score). Reward wrappers call it after the step that ended a turn
        (:class:`~cory_env.CollectiveRewardWrapper`: every agent the round's sum, at its end)."""
        if not self.turn_rewards:
            raise RuntimeError("rewards are delivered per turn only with turn_rewards=True; use deliver_rewards")
        if self._turn_ended is None:
            raise RuntimeError(
                "no turn ended in the last step: deliver turn rewards right after the step that ends one"
            )
        for agent, values in rewards.items():
            if agent not in self.agents:
                raise RuntimeError(f"{agent!r} has left the episode: deliver its reward before its final step")
            values = np.asarray(values, dtype=np.float64).reshape(self.num_conversations)
            self.record.credit(agent, values)
            mean = float(values.mean())
            self._cumulative_rewards[agent] += mean - self.rewards.get(agent, 0.0)
            self.rewards[agent] = mean
            self.infos[agent]["reward"] = self._unbatch(values)

    def deliver_rewards(self, rewards: Mapping[str, np.ndarray]) -> None:
        """Set what each agent receives for this episode (per conversation).

        Reward wrappers such as :class:`~cory_env.CollectiveRewardWrapper` call this
        once the episode is over and before any agent's final step. It replaces, not adds.
        """
        if not self.episode_over:
            raise RuntimeError("rewards are delivered at the end of the episode; it is not over yet")
        for agent, values in rewards.items():
            if agent not in self.agents:
                raise RuntimeError(f"{agent!r} has already left the episode; deliver rewards before its final step")
            values = np.asarray(values, dtype=np.float64).reshape(self.num_conversations)
            mean = float(values.mean())
            # The only reward of an episode comes at its end, so this is also the whole
            # accumulated reward `last()` reports.
            self.rewards[agent] = mean
            self._cumulative_rewards[agent] = mean
            self.infos[agent]["reward"] = self._unbatch(values)
            self.record.credit(agent, values)  # with the agent's last turn

    @property
    def last_transcript(self) -> dict[str, dict[str, Any]] | None:
        """The last finished episode, by role: what the default infos held at its end.

        ``{role: {"role", "query", "context", "response", "response_length", "task_reward",
        "reward"}}`` (lists and arrays over conversations in the batched form), keyed by role
        (``"pioneer"``, ``"observer"``, ...) even under :class:`~cory_env.RoleExchangeWrapper`.
        Kept through ``reset``, so a client that resets as soon as an episode ends (TorchRL's
        rollouts and collectors do) still finds the texts; ``None`` before the first episode
        ends. It is the place to read texts under ``numeric_infos=True``. A copy.
        """
        return None if self._last_transcript is None else copy.deepcopy(self._last_transcript)

    def _initial_info(self, agent: str) -> dict[str, Any]:
        """An agent's infos at ``reset``: its role, and under ``numeric_infos`` every numeric key, zero."""
        if not self.numeric_infos:
            return {"role": agent}
        B = self.num_conversations
        return {
            "role": np.int64(self.possible_agents.index(agent)),
            "response_length": self._unbatch(np.zeros(B, dtype=np.int64)),
            "task_reward": self._unbatch(np.zeros(B, dtype=np.float64)),
            "reward": self._unbatch(np.zeros(B, dtype=np.float64)),
        }

    def _unbatch(self, values: Any) -> Any:
        return values if self.batched else values[0]

    # ------------------------------------------------------------------ render
    def render(self) -> str | None:
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without render_mode; pass render_mode='human' or 'ansi'")
            return None
        if self.rounds > 1:
            text = self.record.text(self.queries, self.possible_agents)
        else:
            text = transcript_text(self.queries, self.possible_agents, self.responses, self.task_rewards)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        pass


raw_env = PioneerObserverEnv
"""The environment without wrappers (PettingZoo's name for it): :class:`PioneerObserverEnv`."""


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a
