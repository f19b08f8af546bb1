"""The checkpoint and evaluation cadences (`checkpoints.plan`) and the in-training budget."""
import pytest

from estimator_trainers import checkpoints
from estimator_trainers import cluster as cluster_lib
from estimator_trainers import evaluation

LOCAL = cluster_lib.ClusterInfo(cluster={})
CHIEF_AND_EVALUATOR = cluster_lib.ClusterInfo(
    cluster={'chief': ['a:1'], 'ps': ['b:1']}, task_type='chief', num_evaluators=1)


@pytest.mark.parametrize('train_steps,eval_every', [
    (672, 68),      # taxi's default run: 10 evaluations
    (1000, 100),    # train-local.sh's CIFAR-10 run
    (2000, 200),    # HW3's resumed run
    (80000, 1000),  # CIFAR-10's default: at most the trainer's checkpoint interval
    (5, 1),
])
def test_checkpoints_every_1000_steps_and_about_ten_evaluations_per_run(train_steps,
                                                                         eval_every):
    plan = checkpoints.plan('/job', LOCAL, None, train_steps=train_steps, default_steps=1000)
    assert plan.every_steps == 1000  # HW3's default, whatever the run's length
    assert plan.eval_every_steps == eval_every and plan.evaluates_while_training
    assert plan.eval_every_secs is None and plan.write_summaries


def test_flags_win_over_the_default_cadences():
    plan = checkpoints.plan('/job', LOCAL, None, every_steps=7, train_steps=672,
                            default_steps=1000, eval_every_steps=11, eval_every_secs=30)
    assert (plan.every_steps, plan.eval_every_steps, plan.eval_every_secs) == (7, 11, 30)


def test_evaluator_tasks_get_checkpoints_at_the_evaluation_interval():
    """An evaluator task evaluates checkpoints: by default there is one per evaluation."""
    plan = checkpoints.plan('/job', CHIEF_AND_EVALUATOR, None, train_steps=1000,
                            default_steps=1000)
    assert plan.every_steps == 100 and not plan.evaluates_while_training
    plan = checkpoints.plan('/job', CHIEF_AND_EVALUATOR, None, every_steps=500,
                            train_steps=1000, default_steps=1000)
    assert plan.every_steps == 500


class _FakeEvaluator:
    """Stands in for `evaluation.Evaluator`: each call takes `secs` of warm time;
    its graph is being prepared in the background until `ready_at` (a time)."""

    def __init__(self, secs, ready_at=0.0, clock=None):
        self.secs, self.run_secs, self.last_run_secs, self.steps = secs, 0.0, 0.0, []
        self.ready_at, self.clock = ready_at, clock

    def preparing(self):
        return self.clock is not None and self.clock[0] < self.ready_at

    def __call__(self, checkpoint_path):
        self.last_run_secs = self.secs
        self.run_secs += self.secs
        self.steps.append(checkpoint_path)


def _hook(evaluator, train_steps, plan, start_step=0):
    hook = evaluation.InTrainingEvaluation(evaluator, train_steps, plan)
    hook.start(start_step)
    return hook


def _runs(hook, evaluator, clock, times_and_steps):
    """Runs ending at `step` at time `now`; returns the steps evaluated."""
    evaluated = []
    for now, step in times_and_steps:
        clock[0] = now
        if hook.due(step):
            evaluator(step)
            hook.evaluated()
            evaluated.append(step)
    return evaluated


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(evaluation.time, 'time', lambda: now[0])
    return now


def test_cheap_evaluations_at_every_multiple_but_the_target(clock):
    evaluator = _FakeEvaluator(secs=0.01)
    plan = checkpoints.CheckpointPlan('/job', every_steps=1000, eval_every_steps=10)
    hook = _hook(evaluator, 100, plan)
    evaluated = _runs(hook, evaluator, clock, [(s / 10, s) for s in range(1, 101)])
    assert evaluated == list(range(10, 100, 10))  # 100 is the driver's final evaluation


def test_runs_that_jump_over_a_multiple_still_evaluate_once_per_interval(clock):
    """Asynchronous workers move the global step on between two runs of the chief."""
    evaluator = _FakeEvaluator(secs=0.0)
    plan = checkpoints.CheckpointPlan('/job', every_steps=1000, eval_every_steps=10)
    hook = _hook(evaluator, 100, plan, start_step=3)
    assert _runs(hook, evaluator, clock, [(1, 7), (2, 13), (3, 14), (4, 38), (5, 41)]) == [
        13, 38, 41]


def test_costly_evaluations_keep_to_the_time_share(clock):
    evaluator = _FakeEvaluator(secs=3.0)
    plan = checkpoints.CheckpointPlan('/job', every_steps=1000, eval_every_steps=10,
                                      eval_share=0.15)
    hook = _hook(evaluator, 1000, plan)
    # An evaluation point every 2 s of training: evaluating each would take 60% of the time.
    for i in range(1, 100):
        _runs(hook, evaluator, clock, [(i * 2.0 + 3.0 * len(evaluator.steps), i * 10)])
    share = evaluator.run_secs / clock[0]
    assert 5 <= len(evaluator.steps) and share <= 0.15 + 3.0 / clock[0]


def test_eval_frequency_secs_throttles(clock):
    evaluator = _FakeEvaluator(secs=0.0)
    plan = checkpoints.CheckpointPlan('/job', every_steps=1000, eval_every_steps=10,
                                      eval_every_secs=10)
    hook = _hook(evaluator, 1000, plan)
    assert len(_runs(hook, evaluator, clock, [(i, i * 10) for i in range(1, 31)])) == 3


def test_costly_evaluations_still_give_five_points_spread_over_the_run(clock):
    """CIFAR-10 on 2 CPU cores: one evaluation costs more than the share allows."""
    evaluator = _FakeEvaluator(secs=20.0)
    plan = checkpoints.CheckpointPlan('/job', every_steps=1000, eval_every_steps=100,
                                      eval_share=0.15)
    hook = _hook(evaluator, 1000, plan)
    evaluated = []
    for step in range(100, 1001, 100):  # 35 s of training per 100 steps
        evaluated += _runs(hook, evaluator, clock,
                           [(step * 0.35 + 20.0 * len(evaluator.steps), step)])
    # Four in training, spread over the run, plus the driver's final evaluation.
    assert evaluated == [100, 400, 600, 800]


def test_a_graph_still_being_prepared_is_waited_for_only_by_the_five_point_curve(clock):
    """A short cheap run (taxi) reaches its first multiples before the evaluation
    graph built in the background is ready: the budget does not stop training for
    the build; the curve's point due by a fifth of the run still does."""
    evaluator = _FakeEvaluator(secs=0.1, ready_at=1.2, clock=clock)
    plan = checkpoints.CheckpointPlan('/job', every_steps=1000, eval_every_steps=10,
                                      eval_share=0.15)
    hook = _hook(evaluator, 100, plan)
    evaluated = _runs(hook, evaluator, clock, [(s / 20, s) for s in range(1, 101)])
    # Not ready at 10 (0.5 s) nor at 20 (1.0 s), whose point the curve asks for by
    # a fifth of the run; ready from 30 on, where the budget alone decides.
    assert evaluated[:2] == [20, 30]
    clock[0] = 0.0
    ready = _FakeEvaluator(secs=0.1)
    assert _runs(_hook(ready, 100, plan), ready, clock,
                 [(s / 20, s) for s in range(1, 101)])[:2] == [10, 30]
