"""Where a benchmark finds the project and `../shared`; importing it puts the project on sys.path
and applies the scripts' TensorFlow settings (`tf_defaults`), before any TensorFlow import.

Every script here runs as `python benchmarks/<name>.py`, so this directory is first on sys.path and
`import benchmark_paths` works before any project module is imported.
"""
import os
import sys

BENCHMARK_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCHMARK_DIR)
SHARED_DIR = os.path.join(os.path.dirname(REPO_ROOT), "shared")

if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)
# The scripts' TensorFlow settings, so benchmarks time the scripts' default path.
import tf_defaults  # pylint: disable=unused-import,wrong-import-position
