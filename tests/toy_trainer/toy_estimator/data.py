"""Toy data step: `python -m toy_estimator.data DATA_DIR` writes points.npz."""
import os
import sys

import numpy as np

if __name__ == '__main__':
    os.makedirs(sys.argv[1], exist_ok=True)
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(-1, 1)
    np.savez(os.path.join(sys.argv[1], 'points.npz'), x=x, y=3 * x + 1)
    print('toy data written to', sys.argv[1])
