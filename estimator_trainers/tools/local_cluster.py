"""A TensorFlow cluster on this machine, one OS process per task: the library.

`python -m estimator_trainers.tools.launcher` (`tools/launcher.py`, the
front) parses its flags into a `LaunchOptions` and calls `launch`; the cloud
rehearsal (`tools/cloud/rehearsal.py`) runs a job's worker pools through the
same `Launcher`, giving each task its own command and environment, and
`tools/local.py` builds the launcher's command line (`launcher_command`) or
runs a package (`run_package`).

Like `gcloud ai-platform local train --distributed`: a `chief`, workers,
parameter servers and evaluators (outside `cluster`, as on Vertex AI; with
evaluators every TF_CONFIG says `"job": {"evaluatorCount": N}` as AI
Platform's did, so the chief leaves evaluation to them) each run the same
command with their own `TF_CONFIG`, addressed on free ports of 127.0.0.1.
Every line a task prints goes to the console prefixed with its role
(`[worker-1] ...`) and to `<log-dir>/<role>-<i>.log`.

Lifecycle:
- The chief exiting 0 ends the job: workers and evaluators get
  `shutdown_grace_secs` to finish on their own, then whatever still runs
  (always the parameter servers, which never exit by themselves) is stopped,
  and the launcher exits 0.
- A task that fails (non-zero exit or killed by a signal; for a parameter
  server any exit) is started again with the same TF_CONFIG while it has
  restarts left (`max_restarts`, per task), as Kubernetes or Vertex AI
  restart a failed replica. A restarted parameter server starts empty: the
  chief's session fails, and it restores its last checkpoint into the ps
  tasks (the steps since are lost). Otherwise every other task is stopped and
  the launcher exits 1 naming the task.
- SIGTERM, Ctrl-C or SIGHUP stops the tasks in `cluster.STOP_ORDER` (the
  chief and evaluators, then the workers, then the parameter servers, so the
  chief saves while the ps still serve; a failed task stops the others the
  same way), names the checkpoint the job-dir keeps, and exits 143 (130,
  129); a second Ctrl-C kills every task at once. Tasks run in their own
  process groups, are stopped group by group (SIGTERM, then SIGKILL after
  `stop_timeout_secs`), and on Linux are also killed by the kernel if the
  launcher itself dies, so no process is left behind.
- Before anything starts it refuses, in one line and leaving nothing behind,
  more than `MAX_TASKS` tasks or more than the available memory holds.

Network (`isolate_network`): TensorFlow's gRPC servers are unauthenticated,
run any graph sent to them and listen on all interfaces, so by default the
launcher moves itself, and every task, into a private network namespace with
only loopback (`private_network`); see the front's docstring for the modes.

Files: a local job-dir or log-dir owned by another user is refused, and
task logs are opened without following symlinks (`safe_io`), since the
default job-dirs live in /tmp.
"""
import ctypes
import dataclasses
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import typing
from typing import IO, Callable, Literal, Optional, Sequence

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import host
from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import safe_io
from estimator_trainers.cluster import CHIEF, EVALUATOR, PS, START_ORDER, STOP_ORDER, WORKER
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import private_network

MODULE = 'estimator_trainers.tools.launcher'  # `python -m` runs the local cluster

LOOPBACK = '127.0.0.1'
NetworkMode = Literal['auto', 'private', 'host']
NETWORK_MODES: tuple[NetworkMode, ...] = typing.get_args(NetworkMode)
EXIT_FAILED = 1
# A local cluster rehearses a job's shape: at most MAX_TASKS tasks, each a
# TensorFlow process of its own that needs about TASK_MEMORY_MIB of resident
# memory before any model (a TF 2.15 parameter server measured 470 MiB).
MAX_TASKS = 64
TASK_MEMORY_MIB = 500
# The signals that stop the cluster: cancel, Ctrl-C, a closed terminal.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_POLL_SECS = 0.1
PR_SET_PDEATHSIG = 1  # prctl: the signal a child gets when its parent dies
# TF_CONFIG's `cluster`: role -> `host:port` addresses.
ClusterSpec = dict[str, list[str]]


def free_ports(count: int, start_port: Optional[int] = None) -> list[int]:
    """`count` TCP ports that nothing listens on, on any interface.

    TensorFlow's servers bind 0.0.0.0, so a port counts as free only when it
    can be bound there. With `start_port`, the ports are the first free ones
    from it upwards (gcloud's scheme); without, the kernel picks them.
    """
    ports: list[int] = []
    sockets: list[socket.socket] = []
    try:
        candidate = start_port
        while len(ports) < count:
            if candidate is not None and candidate > 65535:
                raise OSError('no %d free ports from --start-port %s'
                              % (count, start_port))
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(('', candidate or 0))
            except OSError:
                sock.close()
            else:
                sockets.append(sock)
                ports.append(sock.getsockname()[1])
            if candidate is not None:
                candidate += 1
    finally:
        for sock in sockets:
            sock.close()
    return ports


def make_cluster(ports: Sequence[int], worker_count: int, ps_count: int) -> ClusterSpec:
    """The `cluster` of TF_CONFIG: chief, then workers, then ps, on loopback."""
    addresses = ['%s:%d' % (LOOPBACK, port) for port in ports]
    cluster: ClusterSpec = {CHIEF: addresses[:1]}
    if worker_count:
        cluster[WORKER] = addresses[1:1 + worker_count]
    if ps_count:
        cluster[PS] = addresses[1 + worker_count:1 + worker_count + ps_count]
    return cluster


@dataclasses.dataclass
class Task:
    """One cluster task and the process currently running it.

    Attributes:
      command: this task's own command, or None for the launcher's.
      env: this task's own environment (TF_CONFIG is added to it), or None
        for the launcher's environment without any `CLUSTER_SPEC`.
    """
    task_type: str
    index: int
    tf_config: str
    log_path: str
    command: Optional[list[str]] = None
    env: Optional[dict[str, str]] = None
    process: Optional['subprocess.Popen[bytes]'] = None
    pump: Optional[threading.Thread] = None
    restarts: int = 0
    exit_code: Optional[int] = None

    @property
    def label(self) -> str:
        return '%s-%d' % (self.task_type, self.index)

    def started(self) -> 'subprocess.Popen[bytes]':
        """The process of a task that has been started."""
        assert self.process is not None, '%s was never started' % self.label
        return self.process

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def make_tasks(cluster: ClusterSpec, evaluator_count: int, log_dir: str) -> list[Task]:
    """Tasks in `cluster.START_ORDER`: parameter servers first, evaluators last."""
    counts = {role: len(cluster.get(role, ())) for role in START_ORDER}
    counts[EVALUATOR] = evaluator_count
    roles = [(role, i) for role in START_ORDER for i in range(counts[role])]
    tasks = []
    for task_type, index in roles:
        config: dict[str, object] = {'cluster': cluster,
                                     'task': {'type': task_type, 'index': index}}
        if evaluator_count:
            # As AI Platform did: the chief leaves evaluation to the evaluators.
            config['job'] = {'evaluatorCount': evaluator_count}
        tf_config = json.dumps(config)
        tasks.append(Task(task_type, index, tf_config,
                          os.path.join(log_dir, '%s-%d.log' % (task_type, index))))
    return tasks


class TaskFailed(errors.TaskFailure):
    """A task failed with no restarts left."""


def _error_record_path(task: Task) -> str:
    """Where a task writes its error record: beside its log."""
    return task.log_path + '.error.json'



class Interrupted(Exception):
    """The launcher got SIGTERM, SIGINT or SIGHUP."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_description(code: Optional[int]) -> str:
    """`exit code 3` or `signal SIGKILL` for a Popen return code."""
    if code is not None and code < 0:
        try:
            return 'signal %s' % signal.Signals(-code).name
        except ValueError:
            return 'signal %d' % -code
    return 'exit code %s' % code


class Launcher:
    """Starts, watches, restarts and stops the processes of one local cluster."""

    def __init__(self, command: Optional[Sequence[str]], tasks: list[Task], *,
                 max_restarts: int = 0, shutdown_grace_secs: int = 120,
                 stop_timeout_secs: int = 30, stdout: Optional[IO[str]] = None,
                 stderr: Optional[IO[str]] = None, cwd: Optional[str] = None,
                 job_dir: Optional[str] = None) -> None:
        """`command` runs every task that has none of its own; tasks start in `cwd`;
        after an interruption the launcher names the newest checkpoint of a
        local `job_dir`."""
        self._job_dir = job_dir
        self._command = list(command or ())
        self._cwd = cwd
        self._tasks = tasks
        self._max_restarts = max_restarts
        self._shutdown_grace_secs = shutdown_grace_secs
        self._stop_timeout_secs = stop_timeout_secs
        self._stdout = stdout or sys.stdout
        self._stderr = stderr or sys.stderr
        self._output_lock = threading.Lock()
        self._parent_pid = os.getpid()
        self._prctl = find_prctl()
        self._signal: Optional[int] = None
        self._kill_now = False  # a second Ctrl-C

    def say(self, message: str) -> None:
        """A launcher message on stderr, prefixed like the task lines."""
        with self._output_lock:
            self._stderr.write('[launcher] %s\n' % message)
            self._stderr.flush()

    def run(self) -> int:
        """Runs the cluster to its end; returns the launcher's exit code.

        Installs SIGTERM/SIGINT/SIGHUP handlers (call from the main thread); a
        signal is acted on at the next poll, never half-way through starting
        a task. The tasks are then stopped in `cluster.STOP_ORDER`; a second
        Ctrl-C kills them all at once.
        """
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)
        try:
            for task in self._tasks:
                self._start(task)
                self._check_signal()
            self._wait_for_chief()
            self._finish()
            return 0
        except TaskFailed as e:
            self._stop_in_order()
            with self._output_lock:
                errors.report(e, self._stderr)
            return EXIT_FAILED
        except Interrupted as e:
            self.say('got %s; stopping the tasks: the chief (which saves a checkpoint) '
                     'and evaluators first, then workers, then parameter servers%s'
                     % (e, '; Ctrl-C again to kill them at once'
                        if e.signum == signal.SIGINT else ''))
            self._stop_in_order()
            if self._kill_now:
                return 128 + signal.SIGINT
            self._say_checkpoint()
            return 128 + e.signum
        finally:
            self._join_pumps()

    def _on_signal(self, signum: int, _: object) -> None:
        if self._signal is None:
            self._signal = signum
        elif signum == signal.SIGINT:
            self._kill_now = True

    def _check_signal(self) -> None:
        if self._signal is not None:
            raise Interrupted(self._signal)

    def _start(self, task: Task) -> None:
        if task.env is None:
            env = dict(os.environ)
            env.pop('CLUSTER_SPEC', None)
        else:
            env = dict(task.env)
        # Each task records why it stopped beside its log (the launcher's own
        # record is why the job failed), so a failure is that task's own line.
        env[errors.ERROR_RECORD_ENV] = _error_record_path(task)
        try:
            os.unlink(env[errors.ERROR_RECORD_ENV])
        except OSError:
            pass
        env.update(TF_CONFIG=task.tf_config, PYTHONUNBUFFERED='1')
        command = task.command or self._command
        try:
            log = safe_io.open_append(task.log_path, 'task log')
        except UserInputError as e:
            raise TaskFailed('cannot start %s: %s' % (task.label, e)) from None
        log.write(('---- %s: %s\n' % (task.label, shlex.join(command))).encode())
        log.flush()
        try:
            task.process = subprocess.Popen(  # pylint: disable=consider-using-with
                command, env=env, cwd=self._cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=self._die_with_launcher)
        except OSError as e:
            log.close()
            raise TaskFailed('cannot start %s: %s' % (command[0], e)) from None
        task.exit_code = None
        task.pump = threading.Thread(target=self._pump, args=(task, task.process, log),
                                     name='pump-' + task.label, daemon=True)
        task.pump.start()
        self.say('started %s (pid %d)' % (task.label, task.process.pid))

    def _die_with_launcher(self) -> None:
        """In the child before exec: get SIGKILL when the launcher dies."""
        if self._prctl is not None:
            self._prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != self._parent_pid:
                os._exit(1)  # pylint: disable=protected-access

    def _pump(self, task: Task, process: 'subprocess.Popen[bytes]', log: IO[bytes]) -> None:
        prefix = '[%s] ' % task.label
        output = process.stdout
        assert output is not None  # started with stdout=PIPE
        with log:
            for raw in iter(output.readline, b''):
                log.write(raw)
                log.flush()
                line = raw.decode('utf-8', errors='replace').rstrip('\n')
                with self._output_lock:
                    self._stdout.write(prefix + line + '\n')
                    self._stdout.flush()
            output.close()

    def _poll(self) -> bool:
        """Reaps exited tasks, restarting or failing them; returns chief done."""
        for task in self._tasks:
            if task.process is None or task.exit_code is not None:
                continue
            code = task.process.poll()
            if code is None:
                continue
            task.exit_code = code
            what = exit_description(code)
            if task.task_type == PS and task.restarts >= self._max_restarts:
                raise TaskFailed('%s exited (%s), but parameter servers only stop when '
                                 'the job ends; stopped the other tasks. Its log: %s'
                                 % (task.label, what, task.log_path))
            if code == 0 and task.task_type != PS:
                self.say('%s finished' % task.label)
                continue
            if task.restarts < self._max_restarts:
                task.restarts += 1
                self.say('%s failed (%s); restarting it with the same TF_CONFIG '
                         '(restart %d of %d)%s' % (
                             task.label, what, task.restarts, self._max_restarts,
                             '; its variables are lost: the chief resumes from its '
                             'last checkpoint' if task.task_type == PS else ''))
                self._start(task)
                continue
            own = errors.read_record(_error_record_path(task))
            raise TaskFailed('%s failed (%s)%s; stopped the other tasks. Its log: %s'
                             % (task.label, what, ': %s' % own.message if own else '',
                                task.log_path), flag=own.flag if own else None)
        chief = self._task(CHIEF, 0)
        return chief.exit_code == 0

    def _wait_for_chief(self) -> None:
        while not self._poll():
            self._check_signal()
            time.sleep(_POLL_SECS)

    def _finish(self) -> None:
        """After the chief: let workers/evaluators end, then stop the rest."""
        deadline = time.monotonic() + self._shutdown_grace_secs
        while True:
            self._poll()
            self._check_signal()
            waiting = [t for t in self._tasks if t.task_type in (WORKER, EVALUATOR)
                       and t.running()]
            if not waiting:
                break
            if time.monotonic() >= deadline:
                self.say('%s still running %ds after the chief finished; stopping %s'
                         % (', '.join(t.label for t in waiting),
                            self._shutdown_grace_secs,
                            'it' if len(waiting) == 1 else 'them'))
                break
            time.sleep(_POLL_SECS)
        rest = [t for t in self._tasks if t.running()]
        if rest:
            self.say('stopping %s%s' % (', '.join(t.label for t in rest), (
                ' (parameter servers serve until they are stopped: this is how a job '
                'ends)' if all(t.task_type == PS for t in rest) else '')))
        self._stop_in_order()

    def _stop_in_order(self) -> None:
        """Stops every running task, role by role in `cluster.STOP_ORDER`."""
        for roles in STOP_ORDER:
            self._stop([t for t in self._tasks if t.task_type in roles and t.running()])

    def _stop(self, tasks: list[Task]) -> None:
        """SIGTERM to each task's process group, SIGKILL after the timeout
        (or at once after a second Ctrl-C)."""
        for task in tasks:
            _signal_group(task.started(), signal.SIGKILL if self._kill_now else signal.SIGTERM)
        deadline = time.monotonic() + self._stop_timeout_secs
        while (not self._kill_now and time.monotonic() < deadline
               and any(t.started().poll() is None for t in tasks)):
            time.sleep(_POLL_SECS)
        if self._kill_now and any(t.started().poll() is None for t in tasks):
            self.say('got a second SIGINT; killing %s at once'
                     % ', '.join(t.label for t in tasks if t.started().poll() is None))
        for task in tasks:
            if task.started().poll() is None:
                if not self._kill_now:
                    self.say('%s ignored SIGTERM; killing it' % task.label)
                _signal_group(task.started(), signal.SIGKILL)
            task.started().wait()
            if task.exit_code is None:
                task.exit_code = task.started().returncode

    def _say_checkpoint(self) -> None:
        """Names the checkpoint a rerun resumes from (a local job-dir only)."""
        if not self._job_dir or '://' in self._job_dir:
            return
        kept = job_dir_lib.listed_checkpoint(self._job_dir)
        self.say('the job-dir keeps %s; the same command resumes from it'
                 % kept if kept else 'no checkpoint was saved in %s' % self._job_dir)

    def _join_pumps(self) -> None:
        for task in self._tasks:
            if task.pump is not None:
                task.pump.join(timeout=5)

    def _task(self, task_type: str, index: int) -> Task:
        return next(t for t in self._tasks
                    if t.task_type == task_type and t.index == index)


def _signal_group(process: 'subprocess.Popen[bytes]', signum: int) -> None:
    """Signals the process group the task leads (the task and its children)."""
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def find_prctl() -> Optional[Callable[..., int]]:
    """libc's prctl on Linux, else None (resolved before any fork)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (AttributeError, OSError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong]
    return prctl


def isolate_network(mode: NetworkMode, job_dir: str, command: Sequence[str]) -> Optional[str]:
    """Enters a private network namespace as `mode` asks.

    Call before any thread or task is started.

    Returns:
      None when the tasks will be isolated, else the warning to show.

    Raises:
      UserInputError: `private` was asked for and is unavailable.
      private_network.SetupFailed: the namespace is half made (fatal).
    """
    remote = [a for a in [job_dir] + list(command) if '://' in a]
    if mode == 'auto' and remote:
        reason = '%s names a remote path, which a private network cannot reach' % remote[0]
    elif mode == 'host':
        reason = '--network host'
    else:
        try:
            private_network.enter()
            return None
        except private_network.Unavailable as e:
            if mode == 'private':
                raise UserInputError('--network private: this system does not allow a '
                                     'private network namespace (%s); use --network '
                                     'host on a machine whose ports untrusted hosts '
                                     'cannot reach' % e) from None
            reason = 'no private network namespace here: %s' % e
    return ('warning: the tasks share this machine\'s network (%s); their unauthenticated '
            'gRPC servers listen on all interfaces and run any graph sent to them, so '
            'run this only where untrusted hosts cannot reach its ports '
            '(docs/reliability.md)' % reason)


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """What `launch` starts: the cluster's shape, ports, restarts and network.

    Attributes:
      job_dir: the trainer's --job-dir (a local one is checked for its owner
        and named after an interruption).
      log_dir: local directory of the task logs.
      start_port: the first port to try, or None for ports the kernel picks.
    """
    job_dir: str
    log_dir: str
    parameter_server_count: int = 2
    worker_count: int = 2
    evaluator_count: int = 0
    start_port: Optional[int] = None
    max_restarts: int = 0
    shutdown_grace_secs: int = 120
    stop_timeout_secs: int = 30
    network: NetworkMode = 'auto'


def check_size(options: LaunchOptions, available_bytes: Optional[int] = None) -> None:
    """Refuses a cluster this machine cannot hold, before anything starts.

    Raises:
      UserInputError: more than `MAX_TASKS` tasks, or more tasks than
        MemAvailable holds at `TASK_MEMORY_MIB` each (TensorFlow's own, before
        any model), naming the count flags.
    """
    count = 1 + options.worker_count + options.parameter_server_count + options.evaluator_count
    given = ('--worker-count=%d, --parameter-server-count=%d, --evaluator-count=%d: a '
             'local cluster of %d tasks' % (options.worker_count, options.parameter_server_count,
                                             options.evaluator_count, count))
    if count > MAX_TASKS:
        raise UserInputError('%s is more than the %d this launcher starts on one machine '
                             '(each is a TensorFlow process of its own); lower the counts'
                             % (given, MAX_TASKS), flag='--worker-count')
    available = host.mem_available_bytes() if available_bytes is None else available_bytes
    need = count * TASK_MEMORY_MIB * 2 ** 20
    if available is not None and need > available:
        raise UserInputError('%s needs about %.1f GiB (about %d MiB per TensorFlow process '
                             'before its model), but only %.1f GiB is available '
                             '(MemAvailable); at most %d tasks fit: lower the counts'
                             % (given, need / 2 ** 30, TASK_MEMORY_MIB,
                                available / 2 ** 30,
                                available // (TASK_MEMORY_MIB * 2 ** 20)),
                             flag='--worker-count')


def run_package(package_path: Optional[str], module: str, job_dir: Optional[str],
                user_args: Sequence[str], distributed: bool,
                launcher_options: Sequence[str]) -> typing.NoReturn:
    """Runs a package's module the way `gcloud ai-platform local train
    --package-path DIR --module-name M` ran it: `python -m M ARGS --job-dir
    JOB_DIR` from DIR's parent (default: the current directory), which goes
    on PYTHONPATH, once or once per task of a local cluster; either replaces
    this process."""
    root = os.getcwd()
    if package_path:
        if not os.path.isfile(os.path.join(package_path, '__init__.py')):
            raise UserInputError('--package-path %s: not a Python package directory (no '
                                 '__init__.py)' % package_path, flag='--package-path')
        root = os.path.dirname(os.path.abspath(package_path.rstrip(os.sep)))
    if launcher_options and not distributed:
        raise UserInputError('%s needs --distributed' % launcher_options[0],
                             flag=launcher_options[0])
    if job_dir and '://' not in job_dir:
        job_dir = os.path.abspath(job_dir)
    command = [sys.executable, '-m', module, *user_args] + (
        ['--job-dir', job_dir] if job_dir else [])
    os.environ['PYTHONPATH'] = root + (os.pathsep + os.environ['PYTHONPATH']
                                       if os.environ.get('PYTHONPATH') else '')
    os.environ.pop('TF_CONFIG', None)
    os.chdir(root)
    if not distributed:
        os.execv(command[0], command)
    logs = []
    if not job_dir or '://' in job_dir:
        logs = ['--log-dir', tempfile.mkdtemp(prefix='local-train-logs-')]
    command = launcher_command(job_dir or logs[1], [*logs, *launcher_options], command)
    os.execv(command[0], command)


def launcher_command(job_dir: str, options: Sequence[str],
                     task_command: Sequence[str]) -> list[str]:
    """argv of the launcher running `task_command` as every task of a local cluster.

    The launcher runs as a process of its own (exec'd, not called): its private
    network namespace can only be made by a process that runs no threads yet,
    and importing the trainers started numpy's.
    """
    return ([sys.executable, '-m', MODULE, '--job-dir', job_dir] + list(options)
            + ['--'] + list(task_command))


def launch(command: Sequence[str], options: LaunchOptions) -> int:
    """Checks everything, then runs the cluster; returns the launcher's exit code.

    A refusal (`UserInputError`) leaves nothing behind. Call from the main
    thread of a process that runs no other threads yet (the network namespace).
    """
    job_dir_lib.check_owner(options.job_dir)
    safe_io.check_owner(options.log_dir, '--log-dir')
    check_size(options)
    try:
        warning = isolate_network(options.network, options.job_dir, command)
    except private_network.SetupFailed as e:
        errors.report(errors.TaskFailure(str(e)))
        return EXIT_FAILED
    count = 1 + options.worker_count + options.parameter_server_count
    try:
        ports = free_ports(count, options.start_port)
    except OSError as e:
        raise UserInputError(str(e), flag='--start-port') from None
    cluster = make_cluster(ports, options.worker_count, options.parameter_server_count)
    tasks = make_tasks(cluster, options.evaluator_count, options.log_dir)
    create_logs(options.log_dir, [task.log_path for task in tasks])
    launcher = Launcher(command, tasks, max_restarts=options.max_restarts,
                        shutdown_grace_secs=options.shutdown_grace_secs,
                        stop_timeout_secs=options.stop_timeout_secs, job_dir=options.job_dir)
    if warning:
        launcher.say(warning)
    launcher.say('cluster %s%s in %s; logs in %s' % (
        json.dumps(cluster),
        ' + %d evaluator(s)' % options.evaluator_count if options.evaluator_count else '',
        'the host network' if warning else 'a private network namespace', options.log_dir))
    return launcher.run()


def create_logs(log_dir: str, paths: Sequence[str]) -> None:
    """Creates `log_dir` and the task logs, refusing planted ones before any task starts.

    A refusal removes what this call created (directories included), so that
    a refused launch leaves nothing behind.
    """
    created: list[str] = []
    missing = os.path.abspath(log_dir)
    while not os.path.exists(missing):
        created.insert(0, missing)
        missing = os.path.dirname(missing)
    try:
        os.makedirs(log_dir, exist_ok=True)
        for path in paths:
            new = not os.path.lexists(path)
            safe_io.open_append(path, 'task log').close()
            if new:
                created.append(path)
    except (OSError, UserInputError) as e:
        for path in reversed(created):
            try:
                (os.rmdir if os.path.isdir(path) else os.remove)(path)
            except OSError:
                pass
        if isinstance(e, UserInputError):
            raise
        raise UserInputError('--log-dir %s: %s' % (log_dir, e.strerror or e),
                             flag='--log-dir', path=log_dir) from None
