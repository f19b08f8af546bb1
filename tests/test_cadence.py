"""The checkpoint and evaluation cadence (`checkpoints.plan`) and its in-training budget."""
import pytest

from estimator_trainers import checkpoints
from estimator_trainers import cluster as cluster_lib
from estimator_trainers import evaluation

LOCAL = cluster_lib.ClusterInfo(cluster={})


@pytest.mark.parametrize('train_steps,expected', [
    (672, 68),      # taxi's default run: 10 checkpoints
    (1000, 100),    # train-local.sh's CIFAR-10 run
    (80000, 1000),  # CIFAR-10's default: at most the trainer's longest interval
    (5, 1),
])
def test_default_cadence_is_about_ten_checkpoints_per_run(train_steps, expected):
    plan = checkpoints.plan('/job', LOCAL, None, train_steps=train_steps,
                            max_default_steps=1000)
    assert plan.every_steps == expected
    assert plan.eval_every_secs is None and plan.write_summaries


def test_flags_win_over_the_default_cadence():
    plan = checkpoints.plan('/job', LOCAL, None, every_steps=7, train_steps=672,
                            max_default_steps=1000, eval_every_secs=30)
    assert plan.every_steps == 7 and plan.eval_every_secs == 30


class _FakeEvaluator:
    """Stands in for `evaluation.Evaluator`: each call takes `secs` of warm time."""

    def __init__(self, secs):
        self.secs, self.run_secs, self.last_run_secs, self.steps = secs, 0.0, 0.0, []

    def __call__(self, checkpoint_path):
        self.last_run_secs = self.secs
        self.run_secs += self.secs
        self.steps.append(checkpoint_path)


def _saves(listener, clock, times_and_steps):
    listener.begin()
    for now, step in times_and_steps:
        clock[0] = now
        listener.after_save(None, step)


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(evaluation.time, 'time', lambda: now[0])
    return now


def test_cheap_evaluations_follow_every_checkpoint_but_step_zero_and_the_last(clock):
    evaluator = _FakeEvaluator(secs=0.01)
    plan = checkpoints.CheckpointPlan('/job', every_steps=10)
    listener = evaluation.InTrainingEvaluation(evaluator, 100, plan)
    _saves(listener, clock, [(0, 0)] + [(s / 10, s) for s in range(10, 101, 10)])
    assert len(evaluator.steps) == 9  # steps 10..90; 0 is untrained, 100 is the driver's


def test_costly_evaluations_keep_to_the_time_share(clock):
    evaluator = _FakeEvaluator(secs=3.0)
    plan = checkpoints.CheckpointPlan('/job', every_steps=10, eval_share=0.15)
    listener = evaluation.InTrainingEvaluation(evaluator, 1000, plan)
    # A checkpoint every 2 s of training: evaluating each would take 60% of the time.
    _saves(listener, clock, [(0, 0)] + [(i * 2.0 + 3.0 * len(evaluator.steps), i * 10)
                                        for i in range(1, 100)])
    share = evaluator.run_secs / clock[0]
    assert 5 <= len(evaluator.steps) and share <= 0.15 + 3.0 / clock[0]


def test_eval_frequency_secs_throttles(clock):
    evaluator = _FakeEvaluator(secs=0.0)
    plan = checkpoints.CheckpointPlan('/job', every_steps=10, eval_every_secs=10)
    listener = evaluation.InTrainingEvaluation(evaluator, 1000, plan)
    _saves(listener, clock, [(0, 0)] + [(i, i * 10) for i in range(1, 31)])
    assert len(evaluator.steps) == 3  # at 1 s, 11 s, 21 s


def test_costly_evaluations_still_give_five_points_spread_over_the_run(clock):
    """CIFAR-10 on 2 CPU cores: one evaluation costs more than the share allows."""
    evaluator = _FakeEvaluator(secs=20.0)
    plan = checkpoints.CheckpointPlan('/job', every_steps=100, eval_share=0.15)
    listener = evaluation.InTrainingEvaluation(evaluator, 1000, plan)
    listener.begin()
    evaluated = []
    for step in range(0, 1001, 100):  # 35 s of training per 100 steps
        clock[0] = step * 0.35 + 20.0 * len(evaluator.steps)
        before = len(evaluator.steps)
        listener.after_save(None, step)
        if len(evaluator.steps) > before:
            evaluated.append(step)
    # Four in training, spread over the run, plus the driver's final evaluation.
    assert evaluated == [100, 400, 600, 800]
