"""Speed and memory mechanisms a run switches on; each is tested against the plain path.

- :mod:`~agents.speed.padding_free`: forward passes over packed sequences, no padding;
- :mod:`~agents.speed.cpu_linear`: a faster weight layout for linear layers on the CPU;
- :mod:`~agents.speed.host_memory`: keeping freed memory for the next iteration;
- :mod:`~agents.speed.scoring_reuse`: PPO's first training pass doubling as its scoring pass.

Figures: docs/benchmarks.md.
"""
