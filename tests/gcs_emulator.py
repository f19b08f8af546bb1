"""A local Cloud Storage for tests of TensorFlow's built-in gs:// client.

The storage is the one a rehearsal without an account uses
(`estimator_trainers.tools.local_storage.LocalStorage`: fake-gcs-server behind
a loopback TLS proxy, in a process of its own); this fixture class adds what
tests read back and one retry per failed gs:// request, so that a failing
request fails in seconds. `GcsEmulator.env()` is the environment a subprocess
(trainer, TensorBoard, google-cloud-storage) needs to use it; nothing reaches
the internet.
"""
import contextlib
import io

from estimator_trainers.tools import local_storage


class GcsEmulator(local_storage.LocalStorage):
    """`start()`, `env()`, `stop()`; `create_bucket`, `list_objects`, `read_object`."""

    def __init__(self, work_dir):
        super().__init__(work_dir, retries=1)

    @contextlib.contextmanager
    def proxied_from_another_process(self):
        """`env()`: the proxy always runs in a process of its own, so TensorFlow's
        gs:// calls that hold the GIL (`tf.saved_model.load`, `save`) in the test
        process itself are answered."""
        yield self.env()

    def read_object(self, uri):
        """The bytes of object `gs://bucket/name`, straight from the emulator."""
        bucket, _, name = uri[len('gs://'):].partition('/')
        data = io.BytesIO()
        self.download(bucket, name, data)
        return data.getvalue()
