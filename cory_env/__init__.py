"""cory-env: LLM fine-tuning with cooperative multi-agent RL (CORY) as a PettingZoo environment.

    >>> import cory_env, gymnasium, pettingzoo
    >>> e = pettingzoo.make("aec", "cory/PioneerObserver-v0", num_conversations=8)
    >>> e.possible_agents
    ['pioneer', 'observer']
    >>> g = gymnasium.make("cory/PioneerObserverRole-v0", role="pioneer")

See :mod:`cory_env.pioneer_observer` for the environment's documentation.
"""

import gymnasium
import pettingzoo

from cory_env.pioneer_observer import (
    OBSERVER,
    PIONEER,
    PioneerObserverEnv,
    PromptTooLongError,
    chain_roles,
    env,
    parallel_env,
    raw_env,
    to_parallel,
)
from cory_env.prompts import Prompt, PromptSource, as_prompt_source
from cory_env.rewards import RewardFunctionError
from cory_env.single_agent import ROLE_ENV_ID, RoleEnv
from cory_env.wrappers import CollectiveRewardWrapper, RoleExchangeWrapper

ENV_ID = "cory/PioneerObserver-v0"
pettingzoo.register("aec", ENV_ID, entry_point="cory_env.pioneer_observer:env")
# One role as a single-agent Gymnasium environment (cory_env.single_agent).
gymnasium.register(ROLE_ENV_ID, entry_point="cory_env.single_agent:RoleEnv")

__version__ = "0.3.0"
__all__ = [
    "ENV_ID",
    "OBSERVER",
    "PIONEER",
    "CollectiveRewardWrapper",
    "PioneerObserverEnv",
    "Prompt",
    "PromptSource",
    "PromptTooLongError",
    "ROLE_ENV_ID",
    "RewardFunctionError",
    "RoleEnv",
    "RoleExchangeWrapper",
    "as_prompt_source",
    "chain_roles",
    "env",
    "parallel_env",
    "raw_env",
    "to_parallel",
]
