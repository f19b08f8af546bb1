"""What one Session.run trained, for any hook: the global step after it and its steps.

With `--steps-per-loop` a run may train several steps (`steps_loop`); with
one, the training driver still reads the global step after the train op. Hooks
fetch `step_fetches()`, read `steps_done(results)` and predict where the next
run ends with `run_end(step)`, with or without a loop, and so count global-step
deltas rather than their own calls. `steps_loop` registers each training
graph's `Loop` here.
"""
from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Mapping
from typing import Optional, SupportsInt

import tensorflow as tf

# graph -> `Loop`
_LOOPS: weakref.WeakKeyDictionary[tf.Graph, Loop] = weakref.WeakKeyDictionary()
# What a hook fetches (`step_fetches`): `step`, and `steps` under a loop.
Fetches = dict[str, tf.Tensor]


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one `Session.run` may do.

    Attributes:
      steps_per_loop: at most this many steps per run.
      intervals: a run ends at every multiple of each of these global steps.
      target: and at this global step (`--train-steps`).
    """
    steps_per_loop: int
    intervals: tuple[int, ...]
    target: int

    def run_end(self, step: int) -> int:
        """The global step a run starting at `step` ends at (one training task)."""
        end = min(step + self.steps_per_loop, self.target)
        for every in self.intervals:
            end = min(end, step - step % every + every)
        return max(end, step + 1) if step < self.target else step


class Loop:
    """The runs of one training graph, as hooks see them.

    Attributes:
      settings: `Settings`.
      iterations: the steps the last run ran (a tensor, fetch it).
      step_after: the global step when the last run ended (a tensor).
    """

    def __init__(self, loop_settings: Settings, iterations: tf.Tensor, step_after: tf.Tensor,
                 lifted: Mapping[object, tf.Tensor]) -> None:
        """`lifted`: `tensor.ref()` -> its copy read after the loop."""
        self.graph = iterations.graph
        self.settings = loop_settings
        self.iterations = iterations
        self.step_after = step_after
        self._lifted = lifted

    def outside(self, tensor: tf.Tensor) -> Optional[tf.Tensor]:
        """The copy of `tensor` read after the loop, if it was copied out; else None."""
        return self._lifted.get(tensor.ref())


def current(graph: Optional[tf.Graph] = None) -> Optional[Loop]:
    """The `Loop` of `graph` (default: the default graph), or None without one."""
    return _LOOPS.get(graph or tf.compat.v1.get_default_graph())


def step_fetches() -> Fetches:
    """What a hook fetches to learn the global step after a run (`steps_done`)."""
    loop = current()
    if loop is None:
        return {'step': tf.compat.v1.train.get_global_step()}
    return {'step': loop.step_after, 'steps': loop.iterations}


def steps_done(results: Mapping[str, SupportsInt]) -> tuple[int, int]:
    """(global step after the run, steps this task ran in it) from `step_fetches`' results.

    Without a registered `Loop` (under a `tf.distribute` strategy) the global
    step is read concurrently with the update: one step was run, and +1 is
    taken as the step it made.
    """
    if 'steps' in results:
        return int(results['step']), int(results['steps'])
    return int(results['step']) + 1, 1


def run_end(step: int) -> int:
    """The global step the next run of the default graph ends at, from `step`."""
    loop = current()
    return loop.settings.run_end(step) if loop else step + 1


def register(loop: Loop) -> None:
    """Makes `loop` the `Loop` of its graph."""
    _LOOPS[loop.graph] = loop
