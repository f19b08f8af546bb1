"""The record of a created cloud job, for the program that ran the cloud command.

A program that runs `python -m estimator_trainers.tools.cloud submit ...` and
needs the job it made (the experiment runner, which follows a sweep's jobs
again after an interruption) names a file in `JOB_RECORD_ENV`; the cloud
command writes this record there once the job exists (`write_if_asked`),
and the program reads it (`read`) instead of parsing the command's output.
A missing file means no job was created.
"""
import dataclasses
import json
from typing import Mapping, Optional

from estimator_trainers import safe_io
from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError

JOB_RECORD_ENV = 'ESTIMATOR_TRAINERS_JOB_RECORD'
FORMAT = 1
_LIMITS = user_files.Limits(bytes=64 << 10, depth=2, values=16,
                            expected='it holds one job\'s name, region and project')


@dataclasses.dataclass(frozen=True)
class JobRecord:
    """A created job.

    Attributes:
      name: its resource name, `projects/P/locations/R/customJobs/ID` (or
        `hyperparameterTuningJobs`), what `logs`, `describe` and `cancel` take.
      region: the region it runs in.
      project: the project it belongs to.
    """
    name: str
    region: str
    project: str


def write(path: str, record: JobRecord) -> None:
    """Writes `record` to `path` whole (a reader never sees half of it)."""
    safe_io.write_atomic(path, json.dumps(dict(format=FORMAT, **dataclasses.asdict(record)),
                                          sort_keys=True) + '\n')


def write_if_asked(environ: Mapping[str, str], name: str, region: str, project: str) -> None:
    """Writes the record of a just-created job where `environ`'s `JOB_RECORD_ENV` says, if set."""
    path = environ.get(JOB_RECORD_ENV)
    if path:
        write(path, JobRecord(name=name, region=region, project=project))


def read(path: str) -> Optional[JobRecord]:
    """The record at `path`, or None when there is none (no job was created).

    Raises:
      UserInputError: the file is not such a record, naming it.
    """
    data = user_files.read_json(path, 'job record %s' % path, limits=_LIMITS, optional=True)
    if data is None:
        return None
    fields = [field.name for field in dataclasses.fields(JobRecord)]
    if not isinstance(data, dict) or data.get('format') != FORMAT or not all(
            isinstance(data.get(name), str) and data[name] for name in fields):
        raise UserInputError('%s: not a job record (expected {"format": %d, %s})' % (
            path, FORMAT, ', '.join('"%s": "..."' % name for name in fields)), path=path)
    return JobRecord(**{name: data[name] for name in fields})
