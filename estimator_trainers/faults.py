"""Faults of the machine a task runs on, each turned into one clear line.

- `check_job_dir`: a job-dir that is a file, on a read-only file system or
  under an unwritable parent is refused before training starts.
- `check_buckets`: a gs:// bucket that does not exist or does not answer is
  refused within a deadline, before TensorFlow's client retries for minutes.
- `clean_leftovers`: what TensorFlow leaves when killed mid-save or on a full
  disk (`model.ckpt-N_temp/`, `graph.pbtxt.tmp<hex>`, `export/temp-<ts>/`) is
  removed by the chief at start, once it holds the job-dir lease.
- `disk_full_error`: ENOSPC anywhere in the run becomes one line naming the
  job-dir's file system and the last good checkpoint, which a rerun resumes.
- `check_memory`: the batch a step consumes is estimated against
  MemAvailable before the first step.
- `Termination`: SIGTERM (cancel, preemption, `timeout`), Ctrl-C and a
  closed terminal end every task promptly; a training chief saves a
  checkpoint first. A task other than the chief stopped by SIGTERM after the
  chief finished (a launcher ends the job so: gcloud's `local train
  --distributed`, this project's, Vertex AI) ends normally, with one line.
"""
import contextlib
import errno
import logging
import os
import select
import signal
import sys
import threading
import time
import types
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, NoReturn, Optional

import tensorflow as tf

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import distribution
from estimator_trainers import gcs
from estimator_trainers import hooks
from estimator_trainers import host
from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import lease as lease_lib
from estimator_trainers import process
from estimator_trainers import safe_io
from estimator_trainers import sentinel as sentinel_lib
from estimator_trainers.errors import Error
from estimator_trainers.errors import first_line
from estimator_trainers.errors import TaskFailure
from estimator_trainers.errors import TransientFailure
from estimator_trainers.errors import UserInputError

if TYPE_CHECKING:
    from estimator_trainers import declaration

# What a task other than a training chief gets to end after SIGTERM, and a
# training chief to save its checkpoint (Kubernetes kills after 30 s).
QUICK_EXIT_SECS = 5
SAVE_GRACE_SECS = 25
# How often a saving task checks that the parameter servers it saves from are up.
_SAVE_CHECK_SECS = 1

# --- the job-dir itself -----------------------------------------------------

def check_job_dir(job_dir: str, writable: bool = True) -> None:
    """Refuses a job-dir that cannot hold checkpoints; writes nothing if it does.

    Raises:
      UserInputError: it is a file, its file system is read-only, or it (or
        the directory it would be created in) is not writable.
    """
    # Not a file: `job_dir.check_owner` ran first.
    if writable:
        safe_io.check_writable_directory(job_dir, '--job-dir')


def clean_leftovers(job_dir: str, log: Callable[[str], object]) -> list[str]:
    """Removes the temporary files and directories interrupted saves left.

    Call only while holding the job-dir lease: a running save of another
    process would lose its files. Returns the removed paths.
    """
    removed: list[str] = []
    for directory, patterns in job_dir_lib.leftover_places(job_dir):
        if not tf.io.gfile.isdir(directory):
            continue
        for name in sorted(tf.io.gfile.listdir(directory)):
            name = name.rstrip('/')
            if any(p.match(name) for p in patterns):
                path = os.path.join(directory, name)
                if tf.io.gfile.isdir(path):
                    tf.io.gfile.rmtree(path)
                else:
                    tf.io.gfile.remove(path)
                removed.append(path)
    if removed:
        log('Removed %d leftover(s) of interrupted saves: %s'
            % (len(removed), ', '.join(os.path.basename(p) for p in removed)))
    return removed


# --- Cloud Storage ----------------------------------------------------------

def check_buckets(paths: Iterable[tuple[str, Optional[str]]], timeout_secs: float) -> None:
    """Refuses gs:// paths whose bucket does not exist or does not answer in time.

    TensorFlow's built-in gs:// client retries a failing request for minutes
    (ten times, with backoff), and on some errors (a bucket that does not
    exist, for `makedirs`) loops for good: this asks once for every bucket a
    run names, within a deadline, before any other gs:// request.

    Args:
      paths: (flag, path) pairs; paths that are not gs:// are skipped.
      timeout_secs: how long all the buckets together may take to answer.

    Raises:
      UserInputError: a path Cloud Storage cannot hold (`gcs.path_problem`:
        no bucket name, a bucket name it refuses), or a bucket does not exist.
      TransientFailure: Cloud Storage does not answer within `timeout_secs`, or
        fails (offline, a proxy or firewall in the way, no credentials).
    """
    buckets: dict[str, tuple[str, str]] = {}
    for flag, path in paths:
        if path is not None and gcs.is_gcs_path(path):
            reason = gcs.path_problem(path)
            if reason:  # the cloud tools' rule and words (`--job-dir gs://`)
                raise UserInputError('%s %s: %s' % (flag, path, reason), flag=flag, path=path)
            buckets.setdefault(gcs.bucket_of(path), (flag, path))
    if not buckets:
        return
    answers: dict[str, Optional[BaseException]] = {}

    def ask() -> None:
        # A daemon thread: one blocked inside TensorFlow's client cannot keep
        # the process from ending with the line below.
        for bucket in buckets:
            try:
                tf.io.gfile.stat(bucket)
                answers[bucket] = None
            except tf.errors.PermissionDeniedError:
                answers[bucket] = None  # it exists; what may be done there shows later
            except tf.errors.OpError as e:
                answers[bucket] = e

    thread = threading.Thread(target=ask, name='bucket-check', daemon=True)
    thread.start()
    thread.join(timeout_secs)
    for bucket, (flag, path) in buckets.items():
        if bucket not in answers:
            raise TransientFailure(
                '%s %s: Cloud Storage did not answer within %gs (offline, or a proxy or '
                'firewall in the way?); --storage-timeout-secs sets how long to wait'
                % (flag, path, timeout_secs), flag=flag, path=path)
        error = answers[bucket]
        if isinstance(error, tf.errors.NotFoundError):
            raise UserInputError('%s %s: there is no bucket %s; create it or correct the '
                                 'name' % (flag, path, bucket), flag=flag, path=path)
        if error is not None:
            raise TransientFailure('%s %s: cannot reach Cloud Storage (%s)'
                              % (flag, path, first_line(error)), flag=flag, path=path)


# --- full disk --------------------------------------------------------------

def is_disk_full(error: Optional[BaseException]) -> bool:
    """True for ENOSPC, raised by Python or by TensorFlow's file system layer."""
    while error is not None:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        if 'No space left on device' in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def disk_full_error(job_dir: str) -> TaskFailure:
    """The `TaskFailure` for a full job-dir, naming the checkpoint a rerun resumes."""
    good = last_good_checkpoint(job_dir)
    return TaskFailure(
        'the file system of --job-dir %s is full (No space left on device); %s; free '
        'space and rerun the same command to resume'
        % (job_dir, 'the last good checkpoint is %s' % good if good else
           'no checkpoint was saved yet'))


def last_good_checkpoint(job_dir: str) -> Optional[str]:
    """Newest listed checkpoint of `job_dir` that restores (its step readable), or None."""
    try:
        state = tf.train.get_checkpoint_state(job_dir)
    except tf.errors.OpError:
        return None
    if state is None:
        return None
    paths: list[str] = list(state.all_model_checkpoint_paths)
    for path in reversed(paths):
        try:
            tf.train.load_variable(path, 'global_step')
            return path
        except (tf.errors.OpError, ValueError):
            continue
    return None


# --- memory -----------------------------------------------------------------

def check_memory(estimate: Optional['declaration.MemoryEstimate'], batch: int, batch_flag: str,
                 log: Callable[[str], object], available: Optional[int] = None) -> None:
    """Refuses a step whose estimated memory exceeds what the host has available.

    Args:
      estimate: `declaration.MemoryEstimate` of the trainer, or None (no estimate).
      batch: examples one step of this process holds.
      batch_flag: the flag that sets it, for the message.
      log: callable taking one line.
      available: bytes available (default: MemAvailable).

    Raises:
      UserInputError: the estimate exceeds the available memory.
    """
    if estimate is None:
        return
    available = host.mem_available_bytes() if available is None else available
    need = estimate.fixed_bytes + batch * estimate.bytes_per_example
    text = ('about %s for one step of %d examples (%s per example, rough estimate of '
            'the model\'s activations and variables)'
            % (_size(need), batch, _size(estimate.bytes_per_example)))
    if available is None:
        log('Memory: %s; the available memory is unknown' % text)
    elif need > available:
        raise UserInputError('%s=%d needs %s, but only %s is available (MemAvailable); '
                             'lower %s' % (batch_flag, batch, text, _size(available),
                                           batch_flag))
    else:
        log('Memory: %s; %s available' % (text, _size(available)))


def _size(count: float) -> str:
    for unit in ('bytes', 'KiB', 'MiB'):
        if count < 1024:
            return ('%d %s' if unit == 'bytes' else '%.1f %s') % (count, unit)
        count /= 1024.0
    return '%.1f GiB' % count


# --- SIGTERM, SIGINT, SIGHUP -------------------------------------------------

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Terminated(BaseException):
    """A stop signal arrived; a BaseException so TensorFlow's retry loops let it through."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code(signum: int) -> int:
    """The shell's status for a process that stopped on `signum` (143 for SIGTERM)."""
    return 128 + signum


class Termination:
    """Ends the task promptly on SIGTERM, SIGINT or SIGHUP; a training chief saves first.

    The three mean the same (cancel or preemption, Ctrl-C, a closed
    terminal): stop after the current step, save, and exit with the
    signal's status (143, 130, 129). A second Ctrl-C ends the task at once.

    Python runs signal handlers only in the main thread between bytecodes,
    and TensorFlow's preemption notifier may install its own handler that
    ignores SIGTERM. So `install` puts back Python handlers and also has each
    signal passed to a watchdog thread: when the main thread does not end
    the process in time (blocked inside TensorFlow), the watchdog ends it.
    Where TensorFlow blocks holding the interpreter lock, no thread runs at
    all: a `sentinel` process then ends the task (see `inside_tensorflow`).
    """

    def __init__(self, task_label: str, log: Callable[[str], object],
                 quick_exit_secs: Optional[float] = None, serves: bool = False,
                 chief_finished: Optional[Callable[[], Optional[str]]] = None) -> None:
        """`quick_exit_secs`: how long the main thread gets to end when not saving
        (default `QUICK_EXIT_SECS`; 0 for a parameter server, whose main thread
        waits inside TensorFlow). `serves`: the task serves until it is stopped
        (a parameter server): a stop signal is how it ends, said in a plain line,
        not an error. `chief_finished`: for a task other than the chief, a
        function that says how the chief finished (`str`: e.g. `at step 40`)
        or None while it has not; a SIGTERM after it finished is the job's end."""
        self.task_label = task_label
        self._serves = serves
        self._chief_finished = chief_finished
        # signum -> the chief_finished answer, asked once
        self._job_ended: dict[int, Optional[str]] = {}
        self._log = log
        self._quick_exit_secs = (QUICK_EXIT_SECS if quick_exit_secs is None
                                 else quick_exit_secs)
        self._sentinel: Optional[sentinel_lib.Sentinel] = None
        self.requested = threading.Event()
        self.signum: Optional[int] = None  # the first stop signal
        self._handled: Optional[int] = None  # the first the main thread handled
        self._said = False  # the main thread reports it: the watchdog stays silent
        self.saving = False  # a training chief's stop hook is active
        self.checkpoint_dir: Optional[str] = None
        # (label, address) of the tasks a save needs (ps)
        self._save_needs: tuple[tuple[str, str], ...] = ()
        self._not_saved: Optional[str] = None  # why the final save was not made
        self._saved: Optional[str] = None  # the final save's checkpoint

    def install(self) -> 'Termination':
        """Takes the stop signals over; call from the main thread (`hook` takes them
        back later, should TensorFlow's runtime have installed its own handlers)."""
        self._sentinel = sentinel_lib.Sentinel.start(self.task_label, self._quick_exit_secs)
        if self._sentinel:
            wakeup_fd, watch_fd = self._sentinel.wakeup_fd, self._sentinel.echo_fd
        else:
            watch_fd, wakeup_fd = os.pipe()
            os.set_blocking(wakeup_fd, False)
        self.take_signals()
        signal.set_wakeup_fd(wakeup_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._watchdog, args=(watch_fd,), name='signal-watchdog',
                         daemon=True).start()
        return self

    def take_signals(self) -> None:
        """(Re)installs the handlers of the stop signals; TensorFlow may have taken them."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)

    @contextlib.contextmanager
    def inside_tensorflow(self, what: str, deadline_secs: Optional[float] = None,
                          deadline_error: Optional[Error] = None) -> Iterator[None]:
        """Around a TensorFlow call that keeps the interpreter lock while it waits.

        A stop signal inside ends the task at once with one line naming `what`
        (no Python code can run to do better; TensorFlow may take SIGTERM sent
        to the pid alone over there, see `sentinel`), and `deadline_secs`
        passing ends it with status 1 and `deadline_error`'s line. Without a
        sentinel this only runs the call.
        """
        try:
            if self._sentinel is None:
                yield
            else:
                with self._sentinel.window(what, deadline_secs, deadline_error):
                    yield
        finally:
            # TensorFlow's preemption notifier may have taken SIGTERM meanwhile.
            self.take_signals()

    def set_saving(self, saving: bool) -> None:
        """Whether a stop now saves a checkpoint first (and so gets the longer grace)."""
        self.saving = saving
        if self._sentinel:
            self._sentinel.tell(grace_secs=self._grace(), saving=saving)

    def _grace(self) -> float:
        return SAVE_GRACE_SECS if self.saving else self._quick_exit_secs

    def _on_signal(self, signum: int, frame: Optional[types.FrameType]) -> None:
        del frame
        if self._handled is not None:  # the watchdog sees each signal too: count our own
            if signum == signal.SIGINT:
                self._second_interrupt()
            return
        self._handled = signum
        self.signum = self.signum or signum
        self.requested.set()
        if not self.saving:
            raise Terminated(signum)
        self._log('%s: stopping training after a final checkpoint'
                  % signal.Signals(signum).name)

    def _second_interrupt(self) -> NoReturn:
        process.exit_now(TaskFailure('%s: stopped on a second SIGINT, at once%s' % (
            self.task_label, '; no checkpoint saved' if self.saving else ''),
            exit_code=exit_code(signal.SIGINT)))

    def _watchdog(self, read_fd: int) -> None:
        first: Optional[int] = None
        deadline: Optional[float] = None
        while True:
            timeout = None if deadline is None else max(0.0, min(
                deadline - time.monotonic(), _SAVE_CHECK_SECS))
            if select.select([read_fd], [], [], timeout)[0]:
                data = os.read(read_fd, 64)
                if not data:
                    return
                for signum in data:
                    if signum not in STOP_SIGNALS:
                        continue
                    if first is None:
                        first = signum
                        self.signum = self.signum or signum
                        self.requested.set()
                        deadline = time.monotonic() + self._grace()
                    elif signum == signal.SIGINT:
                        self._second_interrupt()
            if deadline is not None and time.monotonic() >= deadline:
                break
            if deadline is not None and self.saving and self.save_impossible():
                break
        assert first is not None  # the first stop signal set the deadline
        if self._serves:
            self._log(self.served_line(first))
            process.exit_now(None, code=exit_code(first))
        if self.job_ended(first):
            if not self._said:
                self._log(self.job_ended_line(first))
            process.exit_now(None, code=0)
        late = 'it did not end by itself within %ds' % self._grace()
        if self._saved:
            detail = '; saved checkpoint %s, then %s' % (self._saved, late)
        elif self.saving:
            detail = self._no_checkpoint(self._not_saved or late)
        else:
            detail = ''
        process.exit_now(None if self._said else TaskFailure('%s: stopped on %s%s' % (
            self.task_label, signal.Signals(first).name, detail),
            exit_code=exit_code(first)), code=exit_code(first))

    def job_ended(self, signum: int) -> Optional[str]:
        """How the chief finished when a stop by `signum` is the job's normal end
        (SIGTERM, after the chief finished), else None; asked once per signal."""
        if signum != signal.SIGTERM or self._chief_finished is None:
            return None
        if signum not in self._job_ended:
            try:
                self._job_ended[signum] = self._chief_finished()
            except Exception:  # pylint: disable=broad-except
                self._job_ended[signum] = None  # unknown: the stop stays an error
        return self._job_ended[signum]

    def job_ended_line(self, signum: int) -> str:
        """What a task stopped at the job's normal end says (INFO, not an error)."""
        return ('%s: stopped on %s after the chief finished (%s): the job has ended'
                % (self.task_label, signal.Signals(signum).name, self.job_ended(signum)))

    def served_line(self, signum: int) -> str:
        """What a serving task (a parameter server) says when a stop signal ends it."""
        return ('%s: stopped on %s, as a parameter server ends: it serves until the job '
                'stops it' % (self.task_label, signal.Signals(signum).name))

    def final_save(self, session: tf.compat.v1.Session, checkpoint_dir: str,
                   all_finite: Optional[tf.Tensor] = None) -> None:
        """Saves the stop's checkpoint into `checkpoint_dir`; a failure is said, not raised.

        `all_finite` (`hooks.all_variables_finite`): variables that diverged since
        the last loss was checked are not saved over the last good checkpoint.
        """
        if all_finite is not None and not session.run(all_finite):
            self._not_saved = 'its variables are no longer all finite: training diverged'
            return
        try:
            step = session.run(tf.compat.v1.train.get_global_step())
            saver = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVERS)[0]
            self._saved = saver.save(session, os.path.join(checkpoint_dir, 'model.ckpt'),
                                     global_step=step)
        except tf.errors.OpError as e:
            self._not_saved = first_line(e)

    def save_impossible(self) -> bool:
        """True (and says why) when a task the final save needs is unreachable."""
        down = distribution.unreachable_peers(self._save_needs, 0)
        if down:
            self._not_saved = '%s unreachable' % ', '.join('%s at %s' % p for p in down)
        return bool(down)

    def _no_checkpoint(self, reason: str) -> str:
        """`; no final checkpoint (reason); the job-dir keeps ...`, read without TensorFlow."""
        kept = self.checkpoint_dir and job_dir_lib.listed_checkpoint(self.checkpoint_dir)
        return '; no final checkpoint (%s); %s' % (
            reason, 'the job-dir keeps %s' % kept if kept else 'no checkpoint was saved')

    @contextlib.contextmanager
    def stop_wins(self) -> Iterator[None]:
        """After a stop signal, whatever else ends the block ends it as the stop.

        A stop lands anywhere, TensorFlow's own error handling included: when a
        peer dies, TensorFlow raises its failure while the job's stop signal
        arrives, and either may come out (a worker whose ps was SIGKILLed
        printed a 60-line traceback in 1 of 3 runs). So once a stop signal
        came, an exception that is not one of our own errors (`errors.Error`,
        one line already) becomes `Terminated`: the run records and says the
        stop.
        """
        try:
            yield
        except Exception as e:  # pylint: disable=broad-except
            if self.signum is None or isinstance(e, Error):
                raise
            raise Terminated(self.signum) from None

    @contextlib.contextmanager
    def ending_run(self) -> Iterator['Termination']:
        """Turns a stop signal the main thread handled into the one-line `TaskFailure`
        (`stop_wins`: also what TensorFlow raised meanwhile; a parameter server's
        stop, or one at the job's end: an INFO line instead).

        A `Terminated` raised inside a finalizer (`__del__`, which Python
        cannot propagate and reports as "Exception ignored in ..." with a
        traceback) is dropped silently: the stop stays requested, and the
        training hook or the watchdog ends the task.

        After the run, the signals get their default actions back (the process
        is ending anyway; no exception may surface during interpreter shutdown).
        """
        previous_hook = sys.unraisablehook

        def unraisable(args: 'sys.UnraisableHookArgs') -> None:
            if not isinstance(args.exc_value, Terminated):
                previous_hook(args)

        sys.unraisablehook = unraisable
        try:
            with self.stop_wins():
                yield self
        except Terminated as e:
            if self._serves:
                self._log(self.served_line(e.signum))
                raise SystemExit(exit_code(e.signum)) from None
            if self.job_ended(e.signum):
                self._said = True
                self._log(self.job_ended_line(e.signum))
                raise SystemExit(0) from None
            raise self.failure(e.signum) from None
        finally:
            sys.unraisablehook = previous_hook
            for signum in STOP_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)

    def failure(self, signum: Optional[int] = None) -> TaskFailure:
        """The one-line `TaskFailure` for a stop signal the main thread handled."""
        signum = signum or self.signum or signal.SIGTERM
        self._said = True
        if self._not_saved:
            detail = self._no_checkpoint(self._not_saved)
        elif self._saved:
            detail = '; saved checkpoint %s' % self._saved
        else:  # stopped before training, or after it (evaluating, exporting)
            kept = self.checkpoint_dir and last_good_checkpoint(self.checkpoint_dir)
            detail = '; the job-dir keeps %s' % kept if kept else ''
        return TaskFailure('%s: stopped on %s%s' % (
            self.task_label, signal.Signals(signum).name, detail),
            exit_code=exit_code(signum))

    def hook(self, checkpoint_dir: Optional[str], save_needs: Iterable[tuple[str, str]] = (),
             ) -> tf.compat.v1.train.SessionRunHook:
        """A training hook that stops training on a stop signal, saving into `checkpoint_dir`.

        It must run before the checkpoint saver hook: its `end` saves without
        the saver's listeners (which would evaluate) and ends the run. When a
        task in `save_needs` ((label, address) pairs: the parameter servers)
        is unreachable, there is nothing to save: the task ends at once,
        naming it and the checkpoint the job-dir keeps.
        """
        self._save_needs = tuple(save_needs)
        termination = self

        # TensorFlow is untyped: the base class is `Any` to mypy.
        class StopOnTerminationHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
            """Requests a stop after a stop signal; `end` saves a checkpoint and ends the run."""

            def begin(self) -> None:
                self._all_finite = (hooks.all_variables_finite()
                                    if checkpoint_dir is not None else None)
                # TensorFlow's preemption notifier may have taken SIGTERM since.
                termination.take_signals()
                termination.checkpoint_dir = checkpoint_dir
                termination.set_saving(checkpoint_dir is not None)
                if termination.requested.is_set():
                    raise Terminated(termination.signum or signal.SIGTERM)

            def after_run(self, run_context: tf.compat.v1.train.SessionRunContext,
                          run_values: tf.compat.v1.train.SessionRunValues) -> None:
                if termination.requested.is_set():
                    run_context.request_stop()

            def end(self, session: tf.compat.v1.Session) -> None:
                if termination.requested.is_set():
                    if checkpoint_dir is not None and not termination.save_impossible():
                        termination.final_save(session, checkpoint_dir, self._all_finite)
                    raise Terminated(termination.signum or signal.SIGTERM)
                termination.set_saving(False)

        return StopOnTerminationHook()


# --- all of it, around one task's run -----------------------------------------

@contextlib.contextmanager
def guarded_run(job_dir: str, cluster: cluster_lib.ClusterInfo, *, lease_timeout_secs: float,
                log: Callable[[str], object]) -> Iterator[None]:
    """Holds the job-dir for one training task's run and turns faults into one line.

    Before: refuses an unusable job-dir; the chief takes the lease and cleans
    the leftovers of interrupted saves, other tasks check that the lease, if
    any, is their cluster's. After: a full disk becomes a `TaskFailure`; the
    lease is released.
    """
    check_job_dir(job_dir)
    lease = lease_lib.Lease(job_dir, lease_lib.cluster_id(cluster), cluster.task_label,
                            timeout_secs=lease_timeout_secs, log=log)
    try:
        if cluster.is_chief:
            tf.io.gfile.makedirs(job_dir)
            lease.acquire()
            process.at_exit(lease.release)
            clean_leftovers(job_dir, log)
        else:
            lease.check_shared()
        with disk_full_in_threads() as seen:
            yield
        if seen:  # only a writer thread met it: the run's events are incomplete
            raise seen[0]
    except Exception as e:  # pylint: disable=broad-except
        if is_disk_full(e):
            raise disk_full_error(job_dir) from None
        raise
    finally:
        lease.release()


@contextlib.contextmanager
def disk_full_in_threads() -> Iterator[list[BaseException]]:
    """Keeps a full disk met by another thread quiet, and yields what they met.

    TensorFlow's event writers write on threads of their own: on a full disk
    one printed its traceback (and an ERROR line) before the main thread, which
    meets the full disk too, ended with the one line. Their other errors
    still print as before.
    """
    seen: list[BaseException] = []
    previous = threading.excepthook

    def excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and is_disk_full(args.exc_value):
            seen.append(args.exc_value)
        else:
            previous(args)

    def quiet(record: logging.LogRecord) -> bool:
        return not ('writer thread error' in record.getMessage()
                    and 'No space left on device' in record.getMessage())

    logger = logging.getLogger('tensorflow')
    threading.excepthook = excepthook
    logger.addFilter(quiet)
    try:
        yield seen
    finally:
        threading.excepthook = previous
        logger.removeFilter(quiet)
