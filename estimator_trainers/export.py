"""SavedModel export for serving, done once by the chief."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import tensorflow as tf

from estimator_trainers import job_dir as job_dir_lib

if TYPE_CHECKING:
    from estimator_trainers.declaration import ServingInputFn


def export_saved_model(estimator: tf.estimator.Estimator, job_dir: str,
                       serving_input_receiver_fn: ServingInputFn,
                       checkpoint_path: Optional[str] = None) -> str:
    """Exports the latest checkpoint to `<job-dir>/export/<timestamp>`.

    Returns:
      The export directory as a string.
    """
    export_base = job_dir_lib.export_dir(job_dir)
    exported: bytes | str = estimator.export_saved_model(
        export_base, serving_input_receiver_fn, checkpoint_path=checkpoint_path)
    path = exported.decode() if isinstance(exported, bytes) else exported
    tf.compat.v1.logging.info('Exported SavedModel to %s', path)
    return path
