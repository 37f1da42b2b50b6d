"""Acting: a policy choosing tokens in the environment, one step at a time.

:mod:`~cory_agents.acting.actor`: the KV-cache actor (one forward pass per token with the
cached prefix), the sampling settings, and the one way the learners call their model.
"""
