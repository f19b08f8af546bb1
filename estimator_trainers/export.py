"""SavedModel export for serving, done once by the chief."""
import tensorflow as tf

from estimator_trainers import job_dir as job_dir_lib


def export_saved_model(estimator, job_dir, serving_input_receiver_fn,
                       checkpoint_path=None):
    """Exports the latest checkpoint to `<job-dir>/export/<timestamp>`.

    Returns:
      The export directory as a string.
    """
    export_base = job_dir_lib.export_dir(job_dir)
    path = estimator.export_saved_model(
        export_base, serving_input_receiver_fn, checkpoint_path=checkpoint_path)
    path = path.decode() if isinstance(path, bytes) else path
    tf.compat.v1.logging.info('Exported SavedModel to %s', path)
    return path
