"""Modules TensorFlow imports when it loads but these processes never use, deferred.

TensorFlow's GCE cluster resolver (for TPUs on Compute Engine) imports
`googleapiclient.discovery` as TensorFlow loads. Where google-api-python-client
is installed, as it is beside this package (its cloud tools use it), that one
import cost 0.3 CPU-seconds of the 3.1 that loading TensorFlow took (median
of 10 interleaved pairs, benchmarks/RESULTS.md): every trainer task,
evaluator and data step paid it at start-up for a resolver it never builds.
`deferring` loads such modules with the standard library's
`importlib.util.LazyLoader`: the module exists at once and runs on its first
attribute use, so code that does use it behaves as before. (Python 3.11's
lazy modules are not safe to use first from two threads at once; the one user
here, `tools/cloud/api.build`, builds its services on the main thread.)
"""
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Iterable, Iterator, Optional, Sequence

# Imported by `tensorflow` itself, used only by resolvers these trainers never build.
UNUSED_BY_TENSORFLOW = ('googleapiclient.discovery',)


class _LazyFinder(importlib.abc.MetaPathFinder):
    """Finds `names` where the path finders would, loading them lazily."""

    def __init__(self, names: frozenset[str]) -> None:
        self._names = names

    def find_spec(self, fullname: str, path: Optional[Sequence[str]],
                  target: Optional[types.ModuleType] = None,  # pylint: disable=unused-argument
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in self._names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, 'exec_module'):
            spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


@contextlib.contextmanager
def deferring(names: Iterable[str] = UNUSED_BY_TENSORFLOW) -> Iterator[None]:
    """Within the block, a first import of one of `names` runs on its first use."""
    finder = _LazyFinder(frozenset(names))
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
