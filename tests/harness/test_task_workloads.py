"""The one map from a task to the speed workload its answers are timed with."""

from __future__ import annotations

from harness.tasks import TASK_NAMES, WORKLOADS, get_task, task_of, workload_of


def test_every_task_has_one_workload_and_each_workload_at_most_one_task() -> None:
    assert TASK_NAMES == ("gsm8k", "humaneval")
    assert [get_task(name).name for name in TASK_NAMES] == list(TASK_NAMES)
    assert [workload_of(name) for name in TASK_NAMES] == ["math", "code"]
    assert {w: task_of(w) for w in WORKLOADS} == {"math": "gsm8k", "code": "humaneval", "chat": None}
    assert all(workload_of(task_of(w)) == w for w in WORKLOADS if task_of(w) is not None)


def test_a_task_not_listed_is_timed_as_chat() -> None:
    assert workload_of("mmlu") == "chat"


def test_the_stated_sizes_are_what_the_tasks_load() -> None:
    """The numbers help texts and the settle advice quote are the data's own."""
    from harness.tasks import DEFAULT_ITEMS, TEST_SET_SIZE, default_items_text

    for name in TASK_NAMES:
        task = get_task(name, isolation="process")
        assert len(task.load_samples()) == DEFAULT_ITEMS[name]
        assert len(task.load_samples(limit=100_000)) == TEST_SET_SIZE[name]
    assert default_items_text() == "400 GSM8K, 164 HumanEval"
