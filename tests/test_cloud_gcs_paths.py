"""gs:// paths: the one rule for --bucket, --job-dir, trainingInput.jobDir and data paths."""
import pytest

from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import gcs_paths


@pytest.mark.parametrize('text,expected', [
    ('gs://my-bucket', 'gs://my-bucket'),
    ('gs://my-bucket/', 'gs://my-bucket'),
    ('my-bucket', 'gs://my-bucket'),
    ('gs://my-bucket/team/a/', 'gs://my-bucket/team/a'),
    ('gs://my.bucket.example.com/x', 'gs://my.bucket.example.com/x'),
])
def test_parse_bucket(text, expected):
    assert gcs_paths.parse_bucket(text) == expected


@pytest.mark.parametrize('text,reason', [
    ('gs://', 'no bucket name after gs://'),
    ('gs://My_Bucket', "bucket name 'My_Bucket' is not valid"),
    ('gs://a', "bucket name 'a' is not valid"),
    ('https://x/y', 'expected a gs:// path'),
    ('gs://%s' % ('b' * 64), 'is longer than 63 characters'),
    ('gs://192.168.5.4', 'is an IP address'),
    ('gs://google-data', 'contains google'),
    ('gs://a..b', 'dot-separated part that is empty'),
])
def test_parse_bucket_says_what_is_wrong(text, reason):
    with pytest.raises(UserInputError) as raised:
        gcs_paths.parse_bucket(text)
    assert str(raised.value).startswith('--bucket %s: ' % text)
    assert reason in str(raised.value)
    assert raised.value.flag == '--bucket'


@pytest.mark.parametrize('uri,reason', [
    ('gs://bucket/jobs/a', None),
    ('gs://bucket', None),
    ('gs://bucket/data/train-*.csv', None),
    ('gs://bucket/a//b', "empty path segment ('//')"),
    ('gs://bucket/a/./b', "'.' and '..' are not directories in Cloud Storage"),
    ('gs://bucket/a\nb', 'object names cannot hold line breaks'),
    ('gs://bucket/a\x00b', 'control characters in an object name'),
    ('gs://bucket/' + 'x' * 1025, 'object names are at most 1024 bytes'),
    ('/local/dir', 'expected a gs:// path'),
    (None, 'expected a gs:// path'),
])
def test_problem(uri, reason):
    found = gcs_paths.problem(uri)
    assert (found is None) == (reason is None) and (reason is None or reason in found)


def test_directory_drops_trailing_slashes_and_names_the_flag():
    assert gcs_paths.directory('gs://bucket/jobs/x/', '--job-dir') == 'gs://bucket/jobs/x'
    with pytest.raises(UserInputError, match=r'^--job-dir gs://: no bucket name after gs://$'):
        gcs_paths.directory('gs://', '--job-dir')
    with pytest.raises(UserInputError, match=r"^--job-dir '': expected a gs:// path"):
        gcs_paths.directory('', '--job-dir')


def test_empty_segments_are_one_rule_for_every_path_handed_over():
    """`gs://b//x` (a shell's `$BUCKET/x` with `BUCKET=gs://b/`) is `gs://b/x`, said once."""
    assert gcs_paths.normalized('gs://bkt//x/y/') == (
        'gs://bkt/x/y', 'gs://bkt//x/y/ is read as gs://bkt/x/y (empty path segments dropped)')
    assert gcs_paths.normalized('gs://bkt/x/') == ('gs://bkt/x', None)
    assert gcs_paths.normalized('/local//dir') == ('/local//dir', None)
    args, notes = gcs_paths.normalized_args([
        '--data-dir=gs://bkt//data', '--train-files', 'gs://bkt//data/*.csv', '--job-dir',
        'gs://bkt/out/', '--data-dir=gs://bkt//data', '--note=x//y', '-x'])
    assert args == ['--data-dir=gs://bkt/data', '--train-files', 'gs://bkt/data/*.csv',
                    '--job-dir', 'gs://bkt/out/', '--data-dir=gs://bkt/data', '--note=x//y',
                    '-x']
    assert notes == [
        'gs://bkt//data is read as gs://bkt/data (empty path segments dropped)',
        'gs://bkt//data/*.csv is read as gs://bkt/data/*.csv (empty path segments dropped)']
