"""The warning about TensorFlow's GCS plugin (estimator_trainers.gcs)."""
from estimator_trainers import gcs


def test_warns_once_when_the_plugin_would_handle_a_gs_path():
    line = gcs.modular_filesystem_warning(
        ['/data/train.csv', 'gs://b/job', None], {'TF_USE_MODULAR_FILESYSTEM': '1'})
    assert line == (
        'warning: TF_USE_MODULAR_FILESYSTEM is set, so TensorFlow reads and writes '
        'gs://b/job through its GCS plugin, which cannot rename directories: the '
        'SavedModel export fails. Unset it to use TensorFlow\'s built-in gs:// client.')
    assert '\n' not in line
    several = gcs.modular_filesystem_warning(['gs://b/data', 'gs://b/job'],
                                             {'TF_USE_MODULAR_FILESYSTEM': 'true'})
    assert 'reads and writes gs:// paths through' in several


def test_silent_without_the_variable_or_without_gs_paths():
    assert gcs.modular_filesystem_warning(['gs://b/job'], {}) is None
    assert gcs.modular_filesystem_warning(['gs://b/job'],
                                          {'TF_USE_MODULAR_FILESYSTEM': ''}) is None
    assert gcs.modular_filesystem_warning(['/tmp/job', None],
                                          {'TF_USE_MODULAR_FILESYSTEM': '1'}) is None
