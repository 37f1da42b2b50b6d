"""Evaluation: how good a trained policy is, and the reward benchmark.

- :mod:`~cory_agents.evaluation.held_out`: a checkpoint's (or a model's) answers to held-out
  prompts: reward, KL, diversity, pass@k (``examples/evaluate.py``);
- :mod:`~cory_agents.evaluation.policies`: the policy evaluated or exported: a run rebuilt from its
  checkpoint, or a model as it is;
- :mod:`~cory_agents.evaluation.answers`: distinct-n, repetition and pass@k of the answers;
- :mod:`~cory_agents.evaluation.report`: strict JSON and Markdown tables of the results;
- :mod:`~cory_agents.evaluation.reward_benchmark`: ``cory-bench``, CORY against PPO on a reward
  over seeds;
- :mod:`~cory_agents.evaluation.benchmark_report`: what ``cory-bench`` reports (tables, tests, curves);
- :mod:`~cory_agents.evaluation.statistics`: confidence intervals and tests for those comparisons;
- :mod:`~cory_agents.evaluation.rl_statistics`: the RL evaluation protocol over seeds (IQM, stratified
  bootstrap, probability of improvement, performance profiles, rates);
- :mod:`~cory_agents.evaluation.decisions`: different, equivalent within a margin, or undecided (equivalence
  tests, power, the verdict's wording);
- :mod:`~cory_agents.evaluation.communication`: the signalling game's communication measures (what
  ``cory-eval`` reports for a signalling team);
- :mod:`~cory_agents.evaluation.plan`: ``cory-bench --plan``, the seeds a decision needs;
- :mod:`~cory_agents.evaluation.benchmark_config`: ``cory-bench``'s own flags;
- :mod:`~cory_agents.evaluation.benchmark_runs`: one run of a benchmark trained and evaluated (in a worker
  process with ``--jobs``);
- :mod:`~cory_agents.evaluation.archive`: a benchmark's record archived, its report regenerated from it, and
  its runs exported for marl-eval;
- :mod:`~cory_agents.evaluation.study`: ``cory-bench --study``, a study declared in a file, run, archived and
  written into its page;
- :mod:`~cory_agents.evaluation.variants`: a study's variants compared, each arm against itself under the first
  variant's settings;
- :mod:`~cory_agents.evaluation.learning`: did each run learn a game, its success at the end against its start;
- :mod:`~cory_agents.evaluation.sequential`: ``cory-bench --sequential``, seeds added in stages until each
  comparison is decided (alpha spending).
"""
