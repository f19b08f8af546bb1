"""How a task replicates training: `--distribution-strategy`, cluster and devices.

`resolve` is the one place that maps the strategy name, this task's
`ClusterInfo` and its local devices to what `tf.estimator.RunConfig` needs;
trainers never build `tf.distribute` strategies themselves. What each name
means with TensorFlow 2.15's Estimator:

- `parameter_server` (default when the cluster has ps tasks): Estimator's
  own between-graph replication. Variables live on the ps tasks, the chief
  and each worker train asynchronously, or synchronously when the trainer
  wraps its optimizer with `sync_replicas`. No `tf.distribute` strategy.
- `mirrored`: `tf.distribute.MirroredStrategy` over this host's devices, in
  one process. Estimator's distribute coordinator fails with it under a
  TF_CONFIG cluster, so a cluster refuses it.
- `multi_worker_mirrored` (default for a cluster of several workers and no
  ps): `tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy`,
  synchronous all-reduce across the chief and the workers, each over all its
  GPUs (or its CPU). Estimator runs it through the distribute coordinator in
  independent-worker mode. TF makes every worker run the checkpoint and
  summary ops; the non-chief ones write theirs under
  `<job-dir>/tmp_worker_<i>`, which nothing reads.
- `none`: a single training task running the trainer's own graph (which may
  still split batches over local devices, like the CIFAR-10 towers).

Parameter servers and evaluators never get a strategy: they serve variables
or evaluate checkpoints. Evaluation always runs on one device.
"""
import argparse
import dataclasses
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final, Literal, Optional, TextIO, TypeGuard

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import process
from estimator_trainers.errors import TransientFailure
from estimator_trainers.errors import UserInputError

# `--distribution-strategy`'s values.
Strategy = Literal['parameter_server', 'mirrored', 'multi_worker_mirrored', 'none']
PARAMETER_SERVER: Final = 'parameter_server'
MIRRORED: Final = 'mirrored'
MULTI_WORKER_MIRRORED: Final = 'multi_worker_mirrored'
NONE: Final = 'none'
STRATEGIES: Final[tuple[Strategy, ...]] = (PARAMETER_SERVER, MIRRORED, MULTI_WORKER_MIRRORED,
                                           NONE)
# A task this one waits for: (`ps-0`-style label, `host:port`).
Peer = tuple[str, str]


def is_strategy(name: object) -> TypeGuard[Strategy]:
    """True when `name` is one of `STRATEGIES`."""
    return name in STRATEGIES


@dataclasses.dataclass(frozen=True)
class Distribution:
    """How this task takes part in training.

    Attributes:
      strategy: one of `STRATEGIES` (the default already resolved).
      devices: local devices a `tf.distribute` strategy replicates over.
      peers: (`ps-0`-style label, `host:port`) of the tasks this one cannot
        train without; `wait_for_peers` and `watch_peers` bound the wait for them.
      peer_timeout_secs: how long a peer may stay unreachable, at start-up or later.
      max_worker_delay_secs: cap on Estimator's start-up delay of worker i,
        (i + 1) * 5 s (None keeps TensorFlow's 60 s cap).
      builds_strategy: this task trains under a `tf.distribute` strategy.
      num_workers: training tasks in the cluster (chief/master and workers).
      label, address: this task's `worker-0`-style name and `host:port` in
        TF_CONFIG (None for a single process).
    """
    strategy: Strategy
    devices: tuple[str, ...] = ()
    peers: tuple[Peer, ...] = ()
    peer_timeout_secs: float = 600
    max_worker_delay_secs: Optional[int] = None
    builds_strategy: bool = False
    num_workers: int = 1
    label: Optional[str] = None
    address: Optional[str] = None

    @property
    def local_replicas(self) -> int:
        """Copies of the model this process trains (model_fn calls per step)."""
        if not self.builds_strategy:
            return 1
        if self.strategy == MULTI_WORKER_MIRRORED:
            return max(1, sum(1 for d in self.devices if 'gpu' in d.lower()))
        return len(self.devices)

    def replica_batch(self, batch_size: int, flag: str) -> int:
        """`batch_size` split over the local replicas.

        Raises:
          UserInputError: `flag` (e.g. `--batch-size`) does not split evenly.
        """
        if batch_size % self.local_replicas:
            raise UserInputError('%s=%d must be divisible by the %d replicas of %s'
                                 % (flag, batch_size, self.local_replicas, self.strategy))
        return batch_size // self.local_replicas

    @property
    def replicas_in_sync(self) -> int:
        """Model copies whose batches make up one global step under the strategy."""
        if not self.builds_strategy:
            return 1
        workers = self.num_workers if self.strategy == MULTI_WORKER_MIRRORED else 1
        return self.local_replicas * workers

    @property
    def every_worker_saves(self) -> bool:
        """Every worker runs the checkpoint ops (they all-reduce under multi_worker_mirrored)."""
        return self.builds_strategy and self.strategy == MULTI_WORKER_MIRRORED

    @property
    def synchronous(self) -> bool:
        """All workers' batches form one global step (all-reduce strategies)."""
        return self.strategy in (MIRRORED, MULTI_WORKER_MIRRORED)

def resolve(name: Optional[str], cluster: cluster_lib.ClusterInfo,
            devices: Sequence[str] = ('/cpu:0',), *, peer_timeout_secs: float = 600,
            max_worker_delay_secs: Optional[int] = None,
            visible_gpus: int) -> Distribution:
    """Maps `--distribution-strategy` to this task's `Distribution`.

    Args:
      name: one of `STRATEGIES`, or None for the default of this cluster.
      cluster: `cluster.ClusterInfo` of this process.
      devices: this task's local devices (`/gpu:0`, ... or `/cpu:0`, ...).
      peer_timeout_secs, max_worker_delay_secs: see `Distribution`.
      visible_gpus: GPUs this machine has (`devices.gpu_count`);
        `multi_worker_mirrored` always uses all of them.

    Raises:
      UserInputError: the strategy cannot run on this cluster or these devices.
    """
    trainers = cluster.num_workers
    has_ps = cluster.num_ps > 0
    name = strategy_name(name, cluster)
    if not is_strategy(name):
        raise UserInputError('--distribution-strategy=%s is not one of %s'
                             % (name, ', '.join(STRATEGIES)))
    where = 'this TF_CONFIG cluster (%s)' % _describe(cluster)
    if name == PARAMETER_SERVER and not has_ps:
        raise UserInputError('--distribution-strategy=parameter_server needs ps tasks, '
                             'but %s has none' % where)
    if name in (MIRRORED, MULTI_WORKER_MIRRORED, NONE) and has_ps:
        raise UserInputError('--distribution-strategy=%s does not use parameter servers, '
                             'but %s has ps tasks; use parameter_server' % (name, where))
    if name == MIRRORED and cluster.is_distributed:
        raise UserInputError('--distribution-strategy=mirrored runs in one process '
                             'without TF_CONFIG (Estimator fails with it in a cluster); '
                             'in %s use multi_worker_mirrored, which also replicates '
                             'over each worker\'s GPUs' % where)
    if name == NONE and trainers > 1:
        raise UserInputError('--distribution-strategy=none trains a single task, but %s '
                             'has %d training tasks; use multi_worker_mirrored'
                             % (where, trainers))
    if name == MULTI_WORKER_MIRRORED and cluster.chief_type == cluster_lib.MASTER:
        raise UserInputError('--distribution-strategy=multi_worker_mirrored needs a '
                             '"%s", not a "%s", in TF_CONFIG (tf.distribute rejects "%s")'
                             % (cluster_lib.CHIEF, cluster_lib.MASTER, cluster_lib.MASTER))
    if name == MULTI_WORKER_MIRRORED:
        gpus = [d for d in devices if 'gpu' in d.lower()]
        if gpus and len(gpus) != visible_gpus:
            raise UserInputError('multi_worker_mirrored replicates over all %d GPUs of '
                                 'each worker, not %d; drop --num-gpus or limit the GPUs '
                                 'with CUDA_VISIBLE_DEVICES' % (visible_gpus, len(gpus)))
    trains = not (cluster.is_ps or cluster.is_evaluator)
    addresses = (cluster.addresses(cluster.task_type)
                 if cluster.is_distributed and cluster.task_type else ())
    return Distribution(
        strategy=name, devices=tuple(devices),
        peers=_peers(name, cluster) if trains else (),
        peer_timeout_secs=peer_timeout_secs,
        max_worker_delay_secs=max_worker_delay_secs,
        builds_strategy=trains and name in (MIRRORED, MULTI_WORKER_MIRRORED),
        num_workers=trainers,
        label=cluster.task_label if cluster.is_distributed else None,
        address=(addresses[cluster.task_index]
                 if cluster.task_index < len(addresses) else None))


def strategy_name(name: Optional[str], cluster: cluster_lib.ClusterInfo) -> str:
    """`--distribution-strategy`, or the default of this cluster when None:
    parameter servers if it has ps tasks, all-reduce over several training
    tasks, else a single task."""
    if name is not None:
        return name
    if cluster.num_ps:
        return PARAMETER_SERVER
    return MULTI_WORKER_MIRRORED if cluster.num_workers > 1 else NONE


# Estimator's own cap on worker i's start-up delay, (i + 1) * 5 s.
TENSORFLOW_MAX_WORKER_DELAY_SECS = 60
# Steps of the step target per second of the default cap: no step of these
# trainers is shorter than about a millisecond, so the delay stays a small
# share of any run.
STEPS_PER_WORKER_DELAY_SEC = 1000


def max_worker_delay_secs(requested: Optional[int],
                          train_steps: Optional[int]) -> Optional[int]:
    """The cap on Estimator's start-up delay of worker i, (i + 1) * 5 s.

    Estimator staggers asynchronous workers (a fresh model is updated by one
    worker first, which helps it converge); its 60 s cap is made for runs of
    hours and left workers of short runs idle (the 1-ps/4-worker taxi run:
    workers 1-3 trained no step). The default is one second per
    `STEPS_PER_WORKER_DELAY_SEC` steps of the target, at most TensorFlow's
    60 s: 0 (every worker at once) below 1000 steps, 1 s for 1000, 60 s from
    60000.

    Args:
      requested: `--max-worker-delay-secs`, or None for the default.
      train_steps: the run's global step target (None: TensorFlow's default).
    """
    if requested is not None or not train_steps:
        return requested
    return min(TENSORFLOW_MAX_WORKER_DELAY_SECS,
               int(train_steps // STEPS_PER_WORKER_DELAY_SEC))


def steps_per_loop(requested: Optional[int], default: int,
                   distribution: Distribution) -> int:
    """The training steps per Session.run of this task (`steps_loop`).

    Args:
      requested: `--steps-per-loop`, or None.
      default: the trainer's measured default.

    `mirrored` and `multi_worker_mirrored` call the model_fn once per replica
    and all-reduce inside it; Estimator's strategy path cannot place that in
    an in-graph loop over the input. They train one step per run; single
    tasks loop. So do the training tasks of a parameter-server job when
    asked, but when there are several of them they run one step per run by
    default: a loop's body reads and updates the parameter servers'
    variables from inside a function, which each parameter server
    instantiates for each task before that task's first step, and under load
    that stalled workers for seconds (workers of the 1-ps/4-worker taxi run
    trained no step while the chief trained them all).

    Raises:
      UserInputError: more than one step asked for under such a strategy,
        naming the flag and the strategy.
    """
    if requested is None:
        shares_parameter_servers = (distribution.strategy == PARAMETER_SERVER
                                    and distribution.num_workers > 1)
        return 1 if distribution.builds_strategy or shares_parameter_servers else default
    if requested > 1 and distribution.builds_strategy:
        raise UserInputError(
            '--steps-per-loop=%d cannot run under --distribution-strategy=%s (its '
            'replicas all-reduce inside each step, which an in-graph training loop '
            'cannot hold); use --steps-per-loop 1, or parameter servers'
            % (requested, distribution.strategy), flag='--steps-per-loop')
    return requested


def from_flags(args: argparse.Namespace, cluster: cluster_lib.ClusterInfo,
               devices: Sequence[str] = ('/cpu:0',), *, visible_gpus: int) -> Distribution:
    """`resolve` with the values of `flags.add_distribution_flags`."""
    return resolve(args.distribution_strategy, cluster, devices,
                   peer_timeout_secs=args.peer_timeout_secs,
                   max_worker_delay_secs=args.max_worker_delay_secs, visible_gpus=visible_gpus)


def _describe(cluster: cluster_lib.ClusterInfo) -> str:
    jobs = ['%d %s' % (len(cluster.cluster[job]), job) for job in sorted(cluster.cluster)]
    return ', '.join(jobs) if jobs else 'no cluster'


def _peers(strategy: Strategy, cluster: cluster_lib.ClusterInfo) -> tuple[Peer, ...]:
    """The tasks a training task waits for: it cannot make progress without them.

    Variables live on the ps tasks and the chief initialises them, so
    parameter-server training needs those; all-reduce needs every other
    worker. Other workers are not needed with parameter servers: a chief
    restarted late must not wait for workers that already finished.
    """
    own = (cluster.task_type, cluster.task_index)
    jobs: dict[Strategy, tuple[Optional[cluster_lib.Role], ...]] = {
        PARAMETER_SERVER: (cluster_lib.PS, cluster.chief_type),
        MULTI_WORKER_MIRRORED: (cluster.chief_type, cluster_lib.WORKER)}
    peers: list[Peer] = []
    for job in jobs.get(strategy, ()):
        if job is None:
            continue
        for index, address in enumerate(cluster.addresses(job)):
            if (job, index) != own:
                peers.append(('%s-%d' % (job, index), address))
    return tuple(peers)


def unreachable_peers(
        peers: Sequence[Peer], timeout_secs: float, retry_secs: float = 0.5,
        progress: Optional[Callable[[list[Peer], float], None]] = None) -> list[Peer]:
    """Waits until every peer accepts TCP connections; returns those that never did.

    `progress(waiting, elapsed_secs)` is called with the peers still missing
    after the first try and then every `PROGRESS_SECS`.
    """
    started = time.monotonic()
    deadline = started + timeout_secs
    next_progress = started
    waiting = list(peers)
    while True:
        waiting = [(label, address) for label, address in waiting
                   if not _accepts(address)]
        now = time.monotonic()
        if not waiting or now >= deadline:
            return waiting
        if progress and now >= next_progress:
            progress(waiting, now - started)
            next_progress = now + PROGRESS_SECS
        time.sleep(min(retry_secs, max(0.0, deadline - now)))


# How often a task waiting for its peers says so.
PROGRESS_SECS = 30


def _accepts(address: str) -> bool:
    host, port = address.rsplit(':', 1)
    try:
        with socket.create_connection((host.strip('[]'), int(port)), timeout=2):
            return True
    except (OSError, ValueError):
        return False


def wait_for_peers(distribution: Distribution, log: Callable[[str], None],
                   listen: bool = False) -> None:
    """Blocks until every peer of this task accepts connections, saying so while it waits.

    Runs in the main thread before TensorFlow's own (endless) waits for the
    same peers, so a signal ends it like any Python code.

    Args:
      distribution: this task's `Distribution`.
      log: callable taking one line (the progress lines).
      listen: listen on this task's own port meanwhile, where its
        TensorFlow server will serve: all-reduce tasks start their servers
        only once they go ahead, so each must be visible to the others first.

    Raises:
      TransientFailure: a peer did not accept connections within
        `peer_timeout_secs` (naming it): retryable, since a peer scheduled
        late (a pod waiting for its node) comes up after a restart.
      UserInputError: this task's port is taken.
    """
    if not distribution.peers:
        return
    timeout = distribution.peer_timeout_secs

    def progress(waiting: list[Peer], elapsed: float) -> None:
        log('Waiting for %s (from TF_CONFIG) to accept connections: %ds of '
            '--peer-timeout-secs=%g' % (', '.join('%s at %s' % p for p in waiting),
                                        elapsed, timeout))

    placeholder = _listen(distribution) if listen else None
    try:
        missing = unreachable_peers(distribution.peers, timeout, progress=progress)
    finally:
        if placeholder is not None:
            placeholder.close()
    if missing:
        raise TransientFailure(
            'cannot reach %s (from TF_CONFIG) after %gs; is that task running, and is '
            'the address right? (--peer-timeout-secs)'
            % (', '.join('%s at %s' % peer for peer in missing), timeout),
            flag='--peer-timeout-secs')


def _listen(distribution: Distribution) -> Optional[socket.socket]:
    """A listening socket on this task's TF_CONFIG port, closed before TensorFlow binds it.

    It never accepts: a peer's check connects into its backlog, which is
    reset when it closes, so nothing lingers on the port.
    """
    if not distribution.address:
        return None
    port = int(distribution.address.rsplit(':', 1)[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(('', port))  # TensorFlow binds every interface too
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise UserInputError('cannot listen on port %d of %s (%s in TF_CONFIG): %s; is '
                             'another process using it?'
                             % (port, distribution.label, distribution.address,
                                e.strerror or e), flag='TF_CONFIG') from None
    return sock


def watch_peers(distribution: Distribution, stderr: Optional[TextIO] = None,
                poll_secs: Optional[float] = None) -> Optional['PeerWatch']:
    """Watches this task's peers until its training ends; returns the started `PeerWatch`.

    TensorFlow waits forever for a peer that went away (a killed ps: "a new
    session will be created", then an endless wait). Call `wait_for_peers`
    first: this thread only watches peers that were up. When one is
    unreachable for `peer_timeout_secs` until training ends, the process
    ends with one line naming the address, exit status `errors.EXIT_RETRYABLE`
    (a restarted cluster resumes from the last checkpoint).
    """
    if not distribution.peers:
        return None
    return PeerWatch(distribution, stderr or sys.stderr, poll_secs).start()


class PeerWatch:
    """The thread of `watch_peers`; `stop` it when training ends (`hooks.CallAtEndHook`)."""

    def __init__(self, distribution: Distribution, stderr: TextIO,
                 poll_secs: Optional[float] = None) -> None:
        self._distribution = distribution
        self._stderr = stderr
        self._poll_secs = poll_secs or min(5.0, distribution.peer_timeout_secs / 4)
        self._stopped = threading.Event()

    def start(self) -> 'PeerWatch':
        threading.Thread(target=self._watch, name='peer-watch', daemon=True).start()
        return self

    def stop(self) -> None:
        """Stops watching: peers may end once training has."""
        self._stopped.set()

    def _fail(self, error: TransientFailure) -> None:
        process.exit_now(error, stream=self._stderr)

    def _watch(self) -> None:
        dist = self._distribution
        down_since: dict[Peer, float] = {}
        while not self._stopped.wait(self._poll_secs):
            now = time.monotonic()
            for peer in dist.peers:
                if _accepts(peer[1]):
                    down_since.pop(peer, None)
                else:
                    down_since.setdefault(peer, now)
            lost = [peer for peer, since in down_since.items()
                    if now - since >= dist.peer_timeout_secs]
            if lost and not self._stopped.is_set():
                self._fail(TransientFailure(
                    'lost %s (from TF_CONFIG): unreachable for %gs during training; did '
                    'that task die? (--peer-timeout-secs)'
                    % (', '.join('%s at %s' % peer for peer in lost),
                       dist.peer_timeout_secs), flag='--peer-timeout-secs'))
