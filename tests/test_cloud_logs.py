"""Replica log lines from Cloud Logging (`logging v2 entries.list`), offline.

Answers are pages of entries as Vertex AI writes them (resource type
`ml_job`, `task_name` per replica) played through the real `logging v2`
service object; the request bodies are checked against its discovery schema.
"""
import io

import pytest

import cloud_fakes
from estimator_trainers import google_api
from estimator_trainers.tools.cloud import backend as backend_lib
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import train_cloud
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import logs
from estimator_trainers.tools.cloud import schema

PROJECT = 'my-project'
PARENT = 'projects/my-project/locations/us-central1'
NAME = PARENT + '/customJobs/42'
LIST_URI = 'https://logging.googleapis.com/v2/entries:list?alt=json'
GET_URI = 'https://us-central1-aiplatform.googleapis.com/v1/%s?alt=json' % NAME


def entry(task, timestamp, text=None, insert_id=None, json_message=None, labels=None):
    """A log entry as Cloud Logging returns it for a Vertex AI replica."""
    found = {'logName': 'projects/my-project/logs/workerpool0-0',
             'insertId': insert_id or '%s@%s' % (task, timestamp),
             'timestamp': timestamp,
             'resource': {'type': 'ml_job',
                          'labels': {'job_id': '42', 'project_id': PROJECT,
                                     'task_name': task}}}
    if labels:
        found['labels'] = labels
    if json_message is not None:
        found['jsonPayload'] = {'message': json_message, 'levelname': 'INFO'}
    else:
        found['textPayload'] = text
    return found


def _reader(responses):
    http = cloud_fakes.RecordingHttp(responses)
    return logs.LogReader(api.build('logging', 'v2', http), PROJECT, '42'), http


def test_pages_of_several_replicas_come_out_once_in_time_order():
    reader, http = _reader([
        (200, {'entries': [entry('workerpool0-0', '2026-01-01T00:00:01.5Z', 'chief step 1'),
                           entry('workerpool2-0', '2026-01-01T00:00:01Z', 'ps up')],
               'nextPageToken': 'page-2'}),
        (200, {'entries': [entry('workerpool1-1', '2026-01-01T00:00:01.25Z', 'worker 1 up'),
                           entry('workerpool1-0', '2026-01-01T00:00:02.000001Z',
                                 json_message='worker 0 step 1')]}),
        (200, {'entries': [entry('workerpool1-0', '2026-01-01T00:00:02.000001Z',
                                 json_message='worker 0 step 1'),
                           entry('workerpool3-0', '2026-01-01T00:00:03Z',
                                 'Traceback (most recent call last):\n  File "x"\n')]}),
        (200, {}),
    ])
    assert [line for e in reader.read() for line in logs.lines(e)] == [
        '[ps-0] ps up', '[worker-1] worker 1 up', '[chief-0] chief step 1',
        '[worker-0] worker 0 step 1']
    assert [line for e in reader.read() for line in logs.lines(e)] == [
        '[evaluator-0] Traceback (most recent call last):', '[evaluator-0]   File "x"']
    assert reader.read() == []

    first, second, third, fourth = http.requests
    for request in http.requests:
        assert (request.method, request.uri) == ('POST', LIST_URI)
        schema.check('logging', 'v2', 'ListLogEntriesRequest', request.body)
        assert request.body['resourceNames'] == ['projects/my-project']
        assert request.body['orderBy'] == 'timestamp asc'
    job_filter = 'resource.type="ml_job" AND resource.labels.job_id="42"'
    assert first.body['filter'] == job_filter and 'pageToken' not in first.body
    assert second.body == dict(first.body, pageToken='page-2')
    assert third.body['filter'] == job_filter + ' AND timestamp>="2026-01-01T00:00:02.000001Z"'
    assert fourth.body['filter'] == job_filter + ' AND timestamp>="2026-01-01T00:00:03Z"'


@pytest.mark.parametrize('task,labels,expected', [
    ('workerpool0-0', None, 'chief-0'),
    ('workerpool1-3', None, 'worker-3'),
    ('workerpool2-1', None, 'ps-1'),
    ('workerpool3-0', None, 'evaluator-0'),
    ('master-replica-0', None, 'chief-0'),
    ('worker-replica-2', None, 'worker-2'),
    ('ps-replica-0', None, 'ps-0'),
    ('service', None, 'service'),
    ('workerpool0-0', {'trial_id': '3'}, 'trial-3/chief-0'),
])
def test_replica_prefix(task, labels, expected):
    assert logs.replica(entry(task, '2026-01-01T00:00:00Z', 'x', labels=labels)) == expected


def test_time_key_orders_fractions_of_any_length():
    stamps = ['2026-01-01T00:00:01Z', '2026-01-01T00:00:00.9Z', '2026-01-01T00:00:01.000000001Z',
              '2026-01-01T00:00:00.10Z']
    assert sorted(stamps, key=logs.time_key) == [
        '2026-01-01T00:00:00.10Z', '2026-01-01T00:00:00.9Z', '2026-01-01T00:00:01Z',
        '2026-01-01T00:00:01.000000001Z']


class Backend(backend_lib.Backend):
    def __init__(self, responses):
        self.http = cloud_fakes.RecordingHttp(responses)

    def credentials(self):
        return object(), PROJECT

    def transport(self, credentials):
        return self.http


def _logs_command(responses):
    backend = Backend(responses)
    out = io.StringIO()
    code = train_cloud.main(['logs', NAME, '--poll-interval', '0'], backend=backend, out=out,
                    err=io.StringIO())
    return code, out.getvalue().splitlines(), backend.http.requests


def test_logs_command_follows_until_success():
    code, lines, requests = _logs_command([
        (200, {'name': NAME, 'state': 'JOB_STATE_RUNNING'}),
        (200, {'entries': [entry('workerpool0-0', '2026-01-01T00:00:01Z', 'step 100')]}),
        (200, {'name': NAME, 'state': 'JOB_STATE_RUNNING'}),
        (200, {'entries': [entry('workerpool0-0', '2026-01-01T00:00:01Z', 'step 100'),
                           entry('workerpool1-0', '2026-01-01T00:00:02Z', 'step 101')]}),
        (200, {'name': NAME, 'state': 'JOB_STATE_SUCCEEDED'}),
        (200, {}),
        (200, {'entries': [entry('workerpool0-0', '2026-01-01T00:00:05Z', 'exported')]}),
    ])
    assert code == 0
    assert lines == ['[job] JOB_STATE_RUNNING', '[chief-0] step 100', '[worker-0] step 101',
                     '[job] JOB_STATE_SUCCEEDED', '[chief-0] exported']
    assert [(r.method, r.uri) for r in requests] == [('GET', GET_URI), ('POST', LIST_URI)] * 3 + [
        ('POST', LIST_URI)]


def test_a_failed_job_ends_with_its_error_message_and_exit_1():
    code, lines, _ = _logs_command([
        (200, {'name': NAME, 'state': 'JOB_STATE_FAILED',
               'error': {'code': 3, 'message': 'The replica workerpool1-0 exited with a '
                                               'non-zero status of 2.'}}),
        (200, {'entries': [entry('workerpool1-0', '2026-01-01T00:00:01Z',
                                 'error: --data-dir gs://b/x: no metadata.json')]}),
        (200, {}),
    ])
    assert code == 1
    assert lines == ['[job] JOB_STATE_FAILED', '[worker-0] error: --data-dir gs://b/x: no '
                     'metadata.json', 'error: The replica workerpool1-0 exited with a '
                     'non-zero status of 2.']


def test_a_cancelled_job_exits_1_and_a_logging_403_names_the_api():
    code, lines, _ = _logs_command([
        (200, {'name': NAME, 'state': 'JOB_STATE_CANCELLED'}), (200, {}), (200, {})])
    assert (code, lines) == (1, ['[job] JOB_STATE_CANCELLED'])
    with pytest.raises(google_api.ApiError) as raised:
        _logs_command([(200, {'name': NAME, 'state': 'JOB_STATE_RUNNING'}),
                       cloud_fakes.error(403, 'Permission denied on logging')])
    assert str(raised.value) == (
        'entries.list for job 42 in projects/my-project: permission denied (Permission '
        'denied on logging); check that the Cloud Logging API (logging.googleapis.com) is '
        'enabled in project my-project and that your Application Default Credentials hold '
        'roles/logging.viewer')


def test_a_tuning_job_names_its_best_trial_at_the_end():
    tuning = PARENT + '/hyperparameterTuningJobs/9'
    job = {'name': tuning, 'state': 'JOB_STATE_SUCCEEDED',
           'studySpec': {'metrics': [{'metricId': 'accuracy', 'goal': 'MAXIMIZE'}]},
           'trials': [{'id': '2', 'parameters': [{'parameterId': 'learning-rate', 'value': 0.05}],
                       'finalMeasurement': {'metrics': [{'metricId': 'accuracy',
                                                         'value': 0.72}]}}]}
    http = cloud_fakes.RecordingHttp([(200, job), (200, {}), (200, {})])
    out = io.StringIO()
    final = logs.follow(jobs.VertexJobs(PROJECT, 'us-central1', http=http),
                        logs.LogReader(api.build('logging', 'v2', http), PROJECT, '9'),
                        tuning, poll_interval=0, out=out, sleep=lambda s: None)
    assert final == job
    assert out.getvalue().splitlines() == [
        '[job] JOB_STATE_SUCCEEDED',
        '[job] best trial: 2 accuracy=0.72 (learning-rate=0.05)']
