"""The kinds of line a clean run prints by default (issue #48), and a reader of them.

Each kind is one event a user acts on; every other line (TensorFlow's start-up,
configs, graphs, per-step collective notes, library warnings) is shown with
`--verbosity debug` only. `kinds(output)` names the kind of every line of a
console output and lists the lines of no kind; the end-to-end tests assert the
exact set of kinds each entry point prints. docs/experiments.md shows a sample
of each.
"""
import re

# A line of a task in a local cluster or a rehearsal starts with its label.
_TASK = re.compile(r'^\[(chief|master|worker|ps|evaluator)-\d+\] ')
_INFO = r'^\d\d:\d\d:\d\d INFO '
KINDS = (
    ('launcher', r'^\[launcher\] '),
    ('data', _INFO + r'(Training data: |Using the normalisation statistics |'
                     r'Mixed precision: |\w+: \d+ training and \d+ evaluation examples)'),
    ('step target', _INFO + r'Step target \d+ '),
    ('resumed', _INFO + r'Resuming from global step \d+ '),
    ('waiting for peers', _INFO + r'(Waiting for .+ \(from TF_CONFIG\) to accept '
                                  r'connections|Setting up multi_worker_mirrored with )'),
    ('parameter server', _INFO + r'(Parameter server \S+ serving at |\S+: stopped on '
                                 r'SIGTERM, as a parameter server ends)'),
    ('checkpoint', _INFO + r'Saving checkpoints for \d+ into '),
    ('progress', _INFO + r'step \d+/\d+, ([\d.e+-]+|n/a) steps/s, ETA \S+: (.*\([\d.]+ '
                         r'examples/sec, average [\d.]+\)|evaluating for \S+|step \d+ '
                         r'running for \S+)$'),
    ('evaluation', _INFO + r'Evaluation of step \d+ \('),
    ('evaluator', _INFO + r'(Waiting for the first checkpoint after step 0 |Exiting '
                          r'evaluation, global_step=)'),
    ('closing', _INFO + r'Closing the training session: '),
    ('export', _INFO + r'Exported SavedModel to '),
    ('tuning', _INFO + r'Reported tuning metric '),
    ('final evaluation', _INFO + r'Final evaluation at global step \d+: '),
    ('summary', _INFO + r'Run summary:$|^  (wall time|steps|examples/sec|tasks|final metrics|'
                        r'checkpoints|export|TensorBoard)  '),
    ('note', r'^note: '),
    ('estimate', r'^estimate: '),
    ('staged', r'^staged gs://\S+ \(sha256 [0-9a-f]{64}\)$'),
    ('rehearsal', r'^(rehearsal passed:|  (pools|final global step|export|logs|wall time|'
                  r'trial \d+ \(.*\)): )'),
)
_COMPILED = tuple((name, re.compile(pattern)) for name, pattern in KINDS)
# A rehearsal's console (`train-cloud.sh --rehearse`): its notes, the launcher,
# the tasks' events and its summary.
REHEARSAL = frozenset(['note', 'estimate', 'launcher', 'rehearsal', 'data', 'checkpoint',
                       'progress', 'evaluation', 'export', 'final evaluation', 'summary'])
# Kinds a clean run may or may not print: how long the training session's close
# waits is chance (docs/experiments.md).
OCCASIONAL = frozenset(['closing'])


def kind(line):
    """The kind of one console line, or None."""
    line = _TASK.sub('', line)
    for name, pattern in _COMPILED:
        if pattern.search(line):
            return name
    return None


def kinds(output):
    """(set of kinds, [lines of no kind]) of a console output; blank lines skipped."""
    found, unknown = set(), []
    for line in output.splitlines():
        if not line.strip():
            continue
        name = kind(line)
        if name is None:
            unknown.append(line)
        else:
            found.add(name)
    return found, unknown


def assert_kinds(output, expected, maybe=()):
    """The output prints exactly the kinds `expected` (and maybe `OCCASIONAL` ones and
    those of `maybe`, which depend on timing), and no line of another kind."""
    found, unknown = kinds(output)
    assert not unknown, '\n'.join(unknown[:20])
    assert set(expected) <= found <= set(expected) | OCCASIONAL | set(maybe), (
        sorted(found), sorted(expected))
