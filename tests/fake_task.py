"""A stand-in cluster task for launcher tests: no TensorFlow, scripted behaviour.

Reads its role from TF_CONFIG and what to do from $FAKE_PLAN, a JSON object
mapping `<type>-<index>`, `<type>` or `default` to one of:
  serve            listen on this task's address from TF_CONFIG and block
  serve-all        listen on this task's port on all interfaces, as TensorFlow does
  run:SECS         print a few lines over SECS seconds, exit 0
  fail:CODE:SECS   exit CODE after SECS seconds
  refuse:TEXT      write TEXT as a UserInputError to its error record, exit 2 (as
                   errors.run_cli does for a refused flag)
  fail-once:SECS   first start: SIGKILL itself after SECS; later starts: exit 0
  crash-then-serve:SECS  first start: serve, SIGKILL itself after SECS; later: serve
  hang             block forever
  ignore-term      ignore SIGTERM, block forever
  spawn-child      start a grandchild that blocks forever, then block
  save-on-term:SECS  block; on SIGTERM take SECS to exit (as a chief saving), writing
                   the job-dir's `checkpoint` state file naming model.ckpt-7
  serve-until-term serve; on SIGTERM exit at once
Every start appends {pid, tf_config, error_record, child_pid?} to $FAKE_STATE/<label>.jsonl, and
a task stopped by SIGTERM appends {term: time.time(), exit: time.time()}.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time


def main():
    config = json.loads(os.environ['TF_CONFIG'])
    task_type, index = config['task']['type'], config['task']['index']
    label = '%s-%d' % (task_type, index)
    plan = json.loads(os.environ['FAKE_PLAN'])
    action = plan.get(label) or plan.get(task_type) or plan['default']
    state = os.path.join(os.environ['FAKE_STATE'], label + '.jsonl')
    starts = 0
    if os.path.exists(state):
        with open(state) as f:
            starts = len(f.readlines())
    record = {'pid': os.getpid(), 'tf_config': config,
              'error_record': os.environ.get('ESTIMATOR_TRAINERS_ERROR_RECORD')}
    name, *args = action.split(':')
    if name == 'spawn-child':
        child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])
        record['child_pid'] = child.pid
    with open(state, 'a') as f:
        f.write(json.dumps(record) + '\n')
    print('%s started: %s' % (label, action), flush=True)
    if name in ('save-on-term', 'serve-until-term'):
        signal.signal(signal.SIGTERM, lambda *_: _stop(state, args))
    if name == 'crash-then-serve' and starts == 0:
        threading.Timer(float(args[0]), os.kill, (os.getpid(), signal.SIGKILL)).start()
    if name in ('serve', 'serve-all', 'crash-then-serve', 'serve-until-term'):
        host, port = config['cluster'][task_type][index].rsplit(':', 1)
        server = socket.create_server(('' if name == 'serve-all' else host, int(port)))
        print('serving on %s:%s' % (host, port), flush=True)
        while True:
            server.accept()[0].close()
    elif name == 'run':
        for i in range(3):
            print('%s step %d' % (label, i), flush=True)
            time.sleep(float(args[0]) / 3)
        sys.stderr.write('%s done\n' % label)
    elif name == 'fail':
        time.sleep(float(args[1]))
        sys.exit(int(args[0]))
    elif name == 'refuse':
        with open(os.environ['ESTIMATOR_TRAINERS_ERROR_RECORD'], 'w') as f:
            json.dump({'kind': 'UserInputError', 'text': args[0], 'flag': '--x', 'path': None,
                       'exit_code': 2}, f)
        sys.stderr.write('error: %s\n' % args[0])
        sys.exit(2)
    elif name == 'fail-once':
        if starts == 0:
            time.sleep(float(args[0]))
            os.kill(os.getpid(), signal.SIGKILL)
        print('%s restarted' % label, flush=True)
    elif name == 'ignore-term':
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
    elif name in ('hang', 'spawn-child', 'save-on-term'):
        time.sleep(3600)
    else:
        sys.exit('unknown action %r' % action)


def _stop(state, args):
    """A SIGTERM: take the time a save would (`args[0]` seconds), record, exit 143."""
    term = time.time()
    if args:
        time.sleep(float(args[0]))
        job_dir = os.path.join(os.path.dirname(os.environ['FAKE_STATE']), 'job')
        with open(os.path.join(job_dir, 'checkpoint'), 'w') as f:
            f.write('model_checkpoint_path: "model.ckpt-7"\n')
    with open(state, 'a') as f:
        f.write(json.dumps({'term': term, 'exit': time.time()}) + '\n')
    os._exit(143)  # pylint: disable=protected-access


if __name__ == '__main__':
    main()
