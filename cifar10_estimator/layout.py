"""The CIFAR-10 data directory and its records, without TensorFlow.

What the data step (`generate_cifar10_tfrecords`) writes and the input
pipeline (`data`) reads: one TFRecord file per subset and `metadata.json`
with the example counts actually written. Each record holds `image`, the
3072 raw uint8 bytes of a 32x32 RGB image in CHW order, and `label`.
"""
import os
from typing import Dict, List, TypedDict

METADATA_FILE = 'metadata.json'
# The archive's batches of each subset.
SPLITS: Dict[str, List[str]] = {
    'train': ['data_batch_%d' % i for i in range(1, 5)],
    'validation': ['data_batch_5'],
    'eval': ['test_batch'],
}
SUBSETS = tuple(SPLITS)
# Published last and removed first when a set is replaced (see safe_io.staged_files).
DATA_SET_FILES = tuple(subset + '.tfrecords' for subset in SUBSETS) + (METADATA_FILE,)
HEIGHT, WIDTH, DEPTH = 32, 32, 3
IMAGE_BYTES = HEIGHT * WIDTH * DEPTH
NUM_CLASSES = 10


class Metadata(TypedDict):
    """What `metadata.json` holds."""
    num_examples: Dict[str, int]  # {subset: records written}
    image_shape: List[int]
    num_classes: int
    source: str  # the archive or directory's name


def subset_path(data_dir: str, subset: str) -> str:
    """The TFRecord file of `subset` in `data_dir`."""
    return os.path.join(data_dir, subset + '.tfrecords')


def metadata_path(data_dir: str) -> str:
    return os.path.join(data_dir, METADATA_FILE)
