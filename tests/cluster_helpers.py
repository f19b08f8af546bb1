"""Running real clusters through the launcher in tests, and checking what they left.

`Cluster` starts `python -m estimator_trainers.tools.launcher` (or any command that
ends in it), collects its merged output while it runs, knows every task pid
the launcher started, and can SIGKILL a task mid-run. The checks read the
job-dir without TensorFlow where they can.
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import processes
from conftest import cli_env, REPO_ROOT

# Asynchronous workers stop on the global step they read before their last
# update, so when one reaches the target the others may still apply updates
# already in flight: the final step can pass the target by a few steps.
ASYNC_OVERSHOOT = 10

_STARTED = re.compile(r'\[launcher\] started (\S+) \(pid (\d+)\)')


class Cluster:
    """A running launcher process; `lines` fills as it prints."""

    def __init__(self, command, env=None):
        self.process = processes.popen(
            command, cwd=REPO_ROOT, env=cli_env(env), text=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self):
        return ''.join(self.lines)

    def pids(self, label=None):
        """Pids of every process the launcher started (for `label` only, if given)."""
        return [int(pid) for name, pid in _STARTED.findall(self.output)
                if label is None or name == label]

    def kill(self, label):
        """SIGKILLs the current process of task `label` (e.g. `worker-0`)."""
        os.kill(self.pids(label)[-1], signal.SIGKILL)

    def wait_for(self, predicate, what, timeout=240):
        deadline = time.monotonic() + timeout
        while not predicate():
            assert self.process.poll() is None, (
                'launcher exited while waiting for %s\n%s' % (what, self.output[-6000:]))
            assert time.monotonic() < deadline, 'timed out waiting for %s' % what
            time.sleep(0.1)

    def finish(self, timeout=400):
        """Waits for the launcher; returns its exit code."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            processes.kill_tree(self.process)
            raise AssertionError('cluster still running after %ds\n%s'
                                 % (timeout, self.output[-6000:])) from None
        finally:
            self._reader.join(timeout=10)
        return self.process.returncode


def launch(job_dir, cluster_flags, trainer_command, env=None):
    """Starts the launcher for `trainer_command` (a list after `--`)."""
    command = [sys.executable, '-m', 'estimator_trainers.tools.launcher',
               '--job-dir', str(job_dir), *cluster_flags, '--', *trainer_command]
    return Cluster(command, env)


def alive(pid):
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


def assert_all_exited(pids, timeout=10):
    assert pids, 'no processes recorded'
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    assert not left, 'processes left behind: %s' % left


def latest_checkpoint_step(job_dir):
    """Step of `model_checkpoint_path` in `<job_dir>/checkpoint`, or -1 (no TF needed)."""
    try:
        with open(os.path.join(str(job_dir), 'checkpoint')) as f:
            text = f.read()
    except FileNotFoundError:
        return -1
    match = re.search(r'^model_checkpoint_path: "model\.ckpt-(\d+)"', text, re.M)
    return int(match.group(1)) if match else -1


def listed_checkpoints(job_dir):
    """Steps of the checkpoints `<job_dir>/checkpoint` lists, oldest first.

    The last is the newest: after a finished run, its final step.
    """
    with open(os.path.join(str(job_dir), 'checkpoint')) as f:
        text = f.read()
    return [int(step) for step in
            re.findall(r'^all_model_checkpoint_paths: "model\.ckpt-(\d+)"', text, re.M)]


def final_step(output, label='chief-0'):
    """Global step of the chief's `Final evaluation at global step N` line."""
    steps = re.findall(r'^\[%s\] .*Final evaluation at global step (\d+):' % label,
                       output, re.M)
    assert steps, 'no final evaluation by %s\n%s' % (label, output[-6000:])
    return int(steps[-1])


def scalars(directory):
    """{tag: [(step, value), ...]} of a run directory, read as TensorBoard reads it."""
    from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
    acc = event_accumulator.EventAccumulator(
        str(directory), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(event.step, event.value) for event in acc.Scalars(tag)]
            for tag in acc.Tags()['scalars']}


def task_log(job_dir, label):
    with open(os.path.join(str(job_dir), 'logs', label + '.log')) as f:
        return f.read()


def assert_checkpoints_intact(job_dir, final, required_variables, exact_steps=True):
    """Every checkpoint the state file lists restores; the newest holds step `final`.

    A checkpoint written while its task was SIGKILLed must never be listed
    half-written; `required_variables` must all be in each one. The file name
    carries the global step read just before saving: all-reduce training
    saves exactly that step (`exact_steps`), while workers updating parameter
    servers during the save make the saved step larger.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    state = tf.train.get_checkpoint_state(str(job_dir))
    assert state is not None, 'no checkpoint state in %s' % job_dir
    paths = list(state.all_model_checkpoint_paths)
    assert paths[-1] == state.model_checkpoint_path
    for path in paths:
        reader = tf.train.load_checkpoint(path)
        names = set(reader.get_variable_to_shape_map())
        missing = [v for v in required_variables if v not in names]
        assert not missing, '%s lacks %s' % (path, missing)
        named, saved = int(path.rsplit('-', 1)[1]), int(reader.get_tensor('global_step'))
        assert saved == named if exact_steps else saved >= named, (path, saved)
    assert saved == final, (path, saved)


def check_worker_and_chief_restart(job_dir, trainer_command, train_steps,
                                   checkpoint_steps, required_variables):
    """SIGKILLs worker-0 mid-run, later the chief; checks the job still finishes.

    Runs 1 ps + chief + 2 workers with one restart each. The chief is killed
    once a checkpoint `checkpoint_steps` after the worker's death exists; the
    restarted chief must resume from the newest checkpoint (at most
    `checkpoint_steps` lost), every task reaches `train_steps`, every listed
    checkpoint restores, and no process is left.

    Returns:
      The restarted chief's log, for trainer-specific checks.
    """
    # Imported now: the checkpoint is read in the short while the chief is down.
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    cluster = launch(job_dir, ['--parameter-server-count', '1', '--worker-count', '2',
                               '--max-restarts', '1'], trainer_command)
    cluster.wait_for(lambda: '[worker-0] ' in cluster.output and
                     'Done running local_init_op' in task_log(job_dir, 'worker-0'),
                     'worker-0 training')
    killed_at = latest_checkpoint_step(job_dir)
    cluster.kill('worker-0')
    cluster.wait_for(lambda: latest_checkpoint_step(job_dir) >= killed_at + checkpoint_steps,
                     'another checkpoint')
    cluster.kill('chief-0')
    # Nothing saves while the chief is down: this is what it must resume from.
    # Under parameter servers the step stored inside can pass the file name's.
    checkpoint_step = latest_checkpoint_step(job_dir)
    resume_step = int(tf.train.load_variable(
        os.path.join(str(job_dir), 'model.ckpt-%d' % checkpoint_step), 'global_step'))
    assert cluster.finish() == 0, cluster.output[-6000:]
    output = cluster.output
    # A peer's death mid-step is TensorFlow's session recovery, never a traceback.
    assert 'Traceback' not in output, output[-6000:]

    for label in ('worker-0', 'chief-0'):
        assert ('[launcher] %s failed (signal SIGKILL); restarting it with the same '
                'TF_CONFIG (restart 1 of 1)' % label) in output
        configs = re.findall(r'TF_CONFIG environment variable: (\{.*\})',
                             task_log(job_dir, label))
        assert len(configs) == 2 and configs[0] == configs[1]
    chief = task_log(job_dir, 'chief-0').split('---- chief-0: ')[-1]
    assert checkpoint_step >= killed_at + checkpoint_steps
    assert 'Resuming from global step %d in %s (target %d)' % (
        resume_step, job_dir, train_steps) in chief
    assert 'Restoring parameters from %s/model.ckpt-%d' % (job_dir, checkpoint_step) in chief

    final = final_step(output)
    assert train_steps <= final <= train_steps + ASYNC_OVERSHOOT
    assert_checkpoints_intact(job_dir, final, required_variables, exact_steps=False)
    assert len(cluster.pids()) == 6  # 4 tasks + 2 restarts
    assert_all_exited(cluster.pids())
    return chief
