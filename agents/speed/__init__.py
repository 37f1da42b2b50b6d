"""Speed and memory mechanisms a run switches on; each is tested against the plain path.

- :mod:`~cory_agents.speed.padding_free`: forward passes over packed sequences, no padding;
- :mod:`~cory_agents.speed.attention_kinds`: the attention a model's config asks each layer for (windows, modifiers);
- :mod:`~cory_agents.speed.cpu_linear`: a faster weight layout for linear layers on the CPU;
- :mod:`~cory_agents.speed.host_memory`: keeping freed memory for the next iteration;
- :mod:`~cory_agents.speed.scoring_reuse`: PPO's first training pass doubling as its scoring pass.

Figures: docs/benchmarks.md.
"""
