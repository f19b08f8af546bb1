"""Follow a Vertex AI job: its replicas' log lines, then how it ended.

Vertex AI sends each replica's output to Cloud Logging as entries of resource
type `ml_job`, labelled with the job's numeric id (`resource.labels.job_id`)
and the replica (`resource.labels.task_name`: `workerpool<N>-<index>`, pool N
in Vertex order; AI Platform wrote `master-replica-0`, `ps-replica-0`, ...).
`LogReader` pages through `logging v2 entries.list` for them and returns each
entry once, in timestamp order; `follow` prints them as `[chief-0] ...`,
`[worker-1] ...`, `[ps-0] ...` while polling the job until it ends, then the
job's error message last when it failed.
"""
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Set
from typing import TextIO, Tuple

from estimator_trainers import errors
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import roles
from estimator_trainers.tools.cloud import schema
from estimator_trainers.tools.cloud.api import Json, Service

if TYPE_CHECKING:  # the backend imports the clients this module reads with
    from estimator_trainers.tools.cloud.backend import Backend, Credentials

PAGE_SIZE = 1000
# Entries reach Cloud Logging a few seconds after they are written: after the
# job ends, wait this long (at most) and read once more.
FINAL_GRACE_SECS = 10



def log_filter(job_id: str, since: Optional[str] = None, task_name: Optional[str] = None
               ) -> str:
    """The Cloud Logging filter for a job's replica entries (from `since` on;
    one replica's only with `task_name`, e.g. `workerpool0-0`)."""
    text = 'resource.type="ml_job" AND resource.labels.job_id="%s"' % job_id
    if task_name:
        text += ' AND resource.labels.task_name="%s"' % task_name
    if since:
        text += ' AND timestamp>="%s"' % since
    return text


def replica(entry: Json) -> str:
    """`chief-0`, `worker-1`, `ps-0`, ... for a log entry (`trial-3/chief-0` in
    a tuning job); the raw task name when it has another form."""
    labels = dict(entry.get('labels') or {})
    labels.update((entry.get('resource') or {}).get('labels') or {})
    task: str = labels.get('task_name') or labels.get('ml.googleapis.com/task_name') or 'job'
    parsed = roles.parse_replica(task)
    if parsed:
        task = parsed[0].label(parsed[1])
    trial = labels.get('trial_id') or labels.get('ml.googleapis.com/trial_id')
    return 'trial-%s/%s' % (trial, task) if trial else task


def message(entry: Json) -> str:
    """The text of a log entry (text payload, or a JSON payload's `message`)."""
    if 'textPayload' in entry:
        return str(entry['textPayload'])
    payload = entry.get('jsonPayload') or {}
    return str(payload.get('message', payload))


def lines(entry: Json) -> List[str]:
    """The printed lines of one entry, each prefixed with its replica."""
    prefix = '[%s] ' % replica(entry)
    return [prefix + line for line in message(entry).rstrip('\n').splitlines() or ['']]


def time_key(timestamp: str) -> Tuple[str, str]:
    """An RFC 3339 UTC timestamp -> a key that sorts by time (the fraction has
    0 to 9 digits, so the strings themselves do not sort)."""
    seconds, _, fraction = timestamp.rstrip('Z').partition('.')
    return seconds, fraction.ljust(9, '0')


class LogReader:
    """Reads a job's new log entries, each once, oldest first."""

    def __init__(self, service: Service, project: str, job_id: str,
                 task_name: Optional[str] = None) -> None:
        """
        Args:
          service: the `logging v2` service (`api.build`).
          project, job_id: the job's project and numeric id.
          task_name: only this replica's entries (`workerpool1-0`), or None.
        """
        self.service = service
        self.project = project
        self.job_id = job_id
        self.task_name = task_name
        self._seen: Set[Tuple[Any, Any, Any]] = set()
        self._since: Optional[str] = None

    def request_body(self, page_token: Optional[str] = None) -> Json:
        """The `entries.list` body (checked against the discovery schema)."""
        body: Json = {'resourceNames': ['projects/%s' % self.project],
                'filter': log_filter(self.job_id, self._since, self.task_name),
                'orderBy': 'timestamp asc', 'pageSize': PAGE_SIZE}
        if page_token:
            body['pageToken'] = page_token
        schema.check('logging', 'v2', schema.request_schema('logging', 'v2', 'entries.list'),
                     body)
        return body

    def read(self) -> List[Json]:
        """The entries not returned before, in timestamp order (all pages)."""
        found: List[Json] = []
        token = None
        while True:
            response = api.execute(
                self.service.entries().list(body=self.request_body(token)),
                'entries.list for job %s in projects/%s' % (self.job_id, self.project),
                'logging', self.project)
            found.extend(response.get('entries', []))
            token = response.get('nextPageToken')
            if not token:
                break
        new = []
        for entry in found:
            key = (entry.get('logName'), entry.get('insertId'), entry.get('timestamp'))
            if key not in self._seen:
                self._seen.add(key)
                new.append(entry)
        new.sort(key=lambda e: time_key(e.get('timestamp', '')))
        if new:
            # Later reads start at the newest second seen; `_seen` drops repeats.
            self._since = new[-1].get('timestamp') or self._since
        return new


def follow_job(backend: 'Backend', credentials: 'Credentials', vertex: jobs.VertexJobs,
               name: str, poll_interval: float, out: TextIO,
               task_name: Optional[str] = None) -> Json:
    """Prints a job's log lines (one replica's with `task_name`, `workerpool0-0`)
    until it ends; returns the final job resource."""
    info = jobs.parse_job_name(name)
    assert info is not None, 'a resolved job name'
    reader = LogReader(backend.service('logging', 'v2', credentials), info['project'],
                       info['id'], task_name)
    return follow(vertex, reader, name, poll_interval, out=out)


def follow(vertex: jobs.VertexJobs, reader: LogReader, name: str, poll_interval: float,
           out: Optional[TextIO] = None, sleep: Callable[[float], None] = time.sleep) -> Json:
    """Prints the job's log lines and state changes until it ends.

    Returns:
      The final job resource.
    """
    out = out or sys.stdout
    last = None
    while True:
        job: Json = vertex.get(name)
        state = job.get('state', 'JOB_STATE_UNSPECIFIED')
        if state != last:
            out.write('[job] %s\n' % state)
            last = state
        _print(reader.read(), out)
        if state in jobs.FINAL_STATES:
            sleep(min(poll_interval, FINAL_GRACE_SECS))
            _print(reader.read(), out)
            best = jobs.best_trial(job)
            if best:
                out.write('[job] best trial: %s\n' % best)
            if job.get('error', {}).get('message'):
                out.write(errors.line(errors.TaskFailure(job['error']['message'])) + '\n')
            out.flush()
            return job
        out.flush()
        sleep(poll_interval)


def _print(entries: Sequence[Json], out: TextIO) -> None:
    for entry in entries:
        for line in lines(entry):
            out.write(line + '\n')
