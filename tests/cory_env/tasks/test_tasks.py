"""Tasks by name: the registry, the GSM8K prompts, custom tasks, and the trainer's use of them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from cory_env.prompts import Prompt, PromptSource
from cory_env.rewards import get_reward
from cory_env.rewards.gsm8k import canonical_number
from cory_env.tasks import (
    TASKS,
    DatasetUnavailableError,
    Task,
    custom_prompts,
    custom_task,
    get_task,
    load_gsm8k,
    register_task,
)
from cory_env.tasks.gsm8k import reference_answer
from cory_env.templates import GSM8K_OBSERVER, GSM8K_PIONEER, SENTIMENT_OBSERVER, render
from tests.support.toy import save_tiny_llama

# ---------------------------------------------------------------------- registry


def test_builtin_tasks():
    assert {"sentiment", "gsm8k"} <= set(TASKS)
    sentiment, gsm8k = get_task("sentiment"), get_task("gsm8k")
    assert sentiment.observer_template == SENTIMENT_OBSERVER and sentiment.default_reward == "vader"
    assert gsm8k.pioneer_template == GSM8K_PIONEER and gsm8k.observer_template == GSM8K_OBSERVER
    assert "Reference: {response}" in gsm8k.observer_template
    assert gsm8k.default_reward == "gsm8k" and gsm8k.max_new_tokens >= 128
    assert gsm8k.context_length > 2 * gsm8k.max_new_tokens  # room for the pioneer's answer and the observer's


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        get_task("imdb")
    assert "gsm8k" in str(err.value) and "sentiment" in str(err.value)


def test_sentiment_task_wraps_the_review_prefixes(gpt2_tokenizer):
    source = get_task("sentiment").prompts(gpt2_tokenizer, split="test", source="rotten_tomatoes")
    assert isinstance(source, PromptSource)
    prompts = source.sample(np.random.default_rng(0), 5)
    assert all(1 <= len(gpt2_tokenizer(p.query)["input_ids"]) <= 8 for p in prompts)


def test_register_task_checks_templates_and_names():
    base = get_task("sentiment")
    with pytest.raises(ValueError, match="unknown field"):
        dataclasses.replace(base, name="bad", observer_template="{query} {answer}")
    with pytest.raises(ValueError, match="query"):
        dataclasses.replace(base, name="bad", pioneer_template="no field")
    with pytest.raises(ValueError, match="min_new_tokens"):
        dataclasses.replace(base, name="bad", min_new_tokens=20, max_new_tokens=10)
    with pytest.raises(ValueError, match="already registered"):
        register_task(dataclasses.replace(base, description="another"))
    mine = register_task(dataclasses.replace(base, name="test_mine"))
    try:
        assert get_task("test_mine") is mine
    finally:
        TASKS.pop("test_mine")


# -------------------------------------------------------------------------- GSM8K


@pytest.fixture(scope="module")
def embedded_gsm8k():
    return load_gsm8k("gsm_symbolic", "train"), load_gsm8k("gsm_symbolic", "test")


def test_embedded_gsm8k_problems_have_parsed_answers_and_disjoint_splits(embedded_gsm8k):
    train, test = embedded_gsm8k
    assert len(train) + len(test) == 100  # the package's 100 English GSM8K problems
    assert 10 <= len(test) <= 35
    assert not {p.query for p in train} & {p.query for p in test}
    for p in train + test:
        assert isinstance(p.metadata["answer"], str)
        assert canonical_number(p.metadata["answer"]) == p.metadata["answer"]
        assert p.query and p.query.strip() == p.query
    # one problem checked by hand: the shark and remoras, 10 percent
    shark = [p for p in train + test if "remoras" in p.query]
    assert [p.metadata["answer"] for p in shark] == ["10"]


def test_embedded_gsm8k_split_is_deterministic(embedded_gsm8k):
    from cory_env.tasks import gsm8k

    gsm8k._embedded_problems.cache_clear()
    assert (load_gsm8k("gsm_symbolic", "train"), load_gsm8k("gsm_symbolic", "test")) == embedded_gsm8k


def test_gsm8k_auto_falls_back_offline_and_hub_source_fails_clearly(monkeypatch, tmp_path, embedded_gsm8k):
    import datasets.config

    from cory_env.tasks import gsm8k

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    gsm8k._hub_problems.cache_clear()
    with pytest.raises(DatasetUnavailableError) as err:
        load_gsm8k("gsm8k", "test")
    assert "gsm_symbolic" in str(err.value) and "load_dataset" in str(err.value)
    assert load_gsm8k("auto", "test") == embedded_gsm8k[1]
    gsm8k._hub_problems.cache_clear()


def test_gsm8k_bad_source_and_split():
    with pytest.raises(ValueError, match="gsm_symbolic"):
        load_gsm8k("math")
    with pytest.raises(ValueError, match="split"):
        load_gsm8k("gsm_symbolic", "validation")


def test_reference_answer_parsing():
    assert reference_answer("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72") == "72"
    assert reference_answer("... \n#### 1,000\n") == "1000"
    assert reference_answer("#### -3.50") == "-3.5"
    with pytest.raises(ValueError, match="####"):
        reference_answer("no final answer")


def test_gsm8k_prompts_feed_answers_to_the_reward(embedded_gsm8k):
    source = get_task("gsm8k").prompts(None, split="test", source="gsm_symbolic")
    prompts = source.sample(np.random.default_rng(0), 4)
    queries = [p.query for p in prompts]
    answers = [p.metadata["answer"] for p in prompts]
    right = [f"So the answer is {a}." for a in answers]
    wrong = [f"So the answer is {a}1." for a in answers]
    reward = get_reward(get_task("gsm8k").default_reward)
    assert reward(queries, right, answer=answers) == [1.0] * 4
    assert reward(queries, wrong, answer=answers) == [0.0] * 4
    assert render(GSM8K_PIONEER, queries[0]).endswith(f"Question: {queries[0]} Answer:")


# ---------------------------------------------------------------------- custom


ROWS = [{"query": "2 + 2 =", "answer": "4", "level": "easy"}, {"query": "3 * 3 =", "answer": "9", "level": "easy"}]


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _write_csv(path: Path, rows) -> Path:
    keys = list(rows[0])
    path.write_text(",".join(keys) + "\n" + "".join(",".join(str(r[k]) for k in keys) + "\n" for r in rows))
    return path


def test_custom_prompts_from_strings_dicts_dataset_and_files(tmp_path):
    import datasets

    expected = [Prompt(r["query"], {"answer": r["answer"], "level": r["level"]}) for r in ROWS]
    assert [p.query for p in custom_prompts(["a", "b"]).prompts] == ["a", "b"]
    assert custom_prompts(ROWS).prompts == expected
    assert custom_prompts(datasets.Dataset.from_list(ROWS)).prompts == expected
    assert custom_prompts(_write_jsonl(tmp_path / "p.jsonl", ROWS)).prompts == expected
    assert custom_prompts(str(_write_csv(tmp_path / "p.csv", ROWS))).prompts == expected
    only = custom_prompts(ROWS, metadata_fields=["answer"]).prompts
    assert only[0].metadata == {"answer": "4"}
    renamed = [{"problem": r["query"], "answer": r["answer"]} for r in ROWS]
    assert custom_prompts(renamed, query_field="problem").prompts[1] == Prompt("3 * 3 =", {"answer": "9"})


def test_custom_csv_keeps_values_as_written(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text('query,answer\n"Add 1,000 and 7, please",1007\nHow many?,007\n')
    prompts = custom_prompts(path).prompts
    assert prompts[0].query == "Add 1,000 and 7, please"
    assert [p.metadata["answer"] for p in prompts] == ["1007", "007"]


def test_custom_prompt_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        custom_prompts(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError) as err:
        custom_prompts(ROWS, query_field="question")
    assert "'question'" in str(err.value) and "'query', 'answer', 'level'" in str(err.value)
    with pytest.raises(ValueError, match="no column 'solution'"):
        custom_prompts(ROWS, metadata_fields=["solution"])
    with pytest.raises(ValueError, match="no prompts"):
        custom_prompts([])
    (tmp_path / "empty.csv").write_text("query,answer\n")
    with pytest.raises(ValueError, match="no prompts"):
        custom_prompts(tmp_path / "empty.csv")
    (tmp_path / "bad.jsonl").write_text('{"query": "ok"}\n{"query": \n')
    with pytest.raises(ValueError, match="line 2"):
        custom_prompts(tmp_path / "bad.jsonl")
    (tmp_path / "p.txt").write_text("hello\n")
    with pytest.raises(ValueError, match=".jsonl"):
        custom_prompts(tmp_path / "p.txt")
    with pytest.raises(ValueError, match="row 1"):
        custom_prompts([{"query": "fine"}, {"query": ""}])
    with pytest.raises(TypeError, match="datasets.Dataset"):
        custom_prompts(42)


def test_custom_task_takes_settings_from_a_base_task_and_checks_templates(tmp_path):
    task = custom_task(_write_jsonl(tmp_path / "math.jsonl", ROWS), like="gsm8k")
    assert isinstance(task, Task) and task.name == "custom"
    assert task.default_reward == "gsm8k" and task.observer_template == GSM8K_OBSERVER
    assert task.max_new_tokens == get_task("gsm8k").max_new_tokens
    assert len(task.prompts(None)) == 2
    with pytest.raises(ValueError, match="test_data"):
        task.prompts(None, split="test")
    held_out = custom_task(ROWS, like="gsm8k", test_data=ROWS[:1])
    assert len(held_out.prompts(None, split="test")) == 1

    own = custom_task(ROWS, pioneer_template="Q: {query}\nA:", observer_template="Q: {query}\nHint: {response}\nA:")
    assert own.pioneer_template == "Q: {query}\nA:" and own.default_reward == "vader"
    with pytest.raises(ValueError, match="unknown field"):
        custom_task(ROWS, observer_template="{query} {hint}")
    with pytest.raises(ValueError, match="pioneer_template"):
        custom_task(ROWS, pioneer_template="{query}{response}")


# ----------------------------------------------------------------------- trainer


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, gpt2_tokenizer) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), gpt2_tokenizer)


def _config(model: Path, out: Path, **kw):
    from cory_agents.training.config import TrainConfig

    settings = dict(
        model=str(model),
        iterations=1,
        batch_size=2,
        mini_batch_size=2,
        ppo_epochs=1,
        out=str(out),
        report_to="none",
        min_new_tokens=4,
        max_new_tokens=8,
    )
    settings.update(kw)
    return TrainConfig(**settings)


def test_trainer_runs_the_gsm8k_task_with_its_defaults(tiny_model, tmp_path):
    from cory_agents.training.trainer import Trainer

    trainer = Trainer(_config(tiny_model, tmp_path / "run", task="gsm8k", prompt_source="gsm_symbolic"))
    assert trainer.config.reward == "gsm8k"
    assert trainer.config.context_length == get_task("gsm8k").context_length
    assert trainer.game.unwrapped.observer_template == GSM8K_OBSERVER
    trainer.train(progress=False)
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    problems = {p.query for p in load_gsm8k("gsm_symbolic", "train")}
    assert samples and all(s["query"] in problems for s in samples)
    assert all(s["task_reward"] in (0.0, 1.0) for s in samples)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["max_new_tokens"] == 8


def test_trainer_runs_a_task_file_with_own_templates(tiny_model, tmp_path):
    from cory_agents.training.trainer import Trainer

    path = _write_csv(tmp_path / "mine.csv", ROWS)
    config = _config(
        tiny_model,
        tmp_path / "run",
        task="gsm8k",
        task_file=str(path),
        context_length=64,
        pioneer_template="Q: {query} A:",
        observer_template="Q: {query} Hint: {response} A:",
    )
    trainer = Trainer(config)
    raw = trainer.game.unwrapped
    assert raw.pioneer_template == "Q: {query} A:" and trainer.config.reward == "gsm8k"
    raw.reset(seed=0)
    assert {p.query for p in raw.prompts} <= {"2 + 2 =", "3 * 3 ="}
    assert raw._metadata["answer"] == [p.metadata["answer"] for p in raw.prompts]
