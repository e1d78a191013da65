"""The benchmark scripts still run: each in a fresh process on its smallest setting.

Benchmarks are not timed here (their numbers are in benchmarks/RESULTS.md); this only catches a
script that no longer matches the project's API, as bench_serving.py once called an export
function the task protocol had replaced.
"""
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, shared_path

pytestmark = pytest.mark.slow


def test_bench_serving_exports_and_serves_both_paddings_and_bfloat16(tmp_path):
  shared_path("glue", "SST-2", "train.tsv")
  shared_path("fixtures", "uncased_vocab", "vocab.txt")
  completed = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "benchmarks", "bench_serving.py"),
       "--num_requests=3", "--num_batches=1", "--batch_size=4", "--threads=1", "--nopeer",
       "--model=tiny",
       "--export_root=" + str(tmp_path)], capture_output=True, text=True, timeout=600)
  assert completed.returncode == 0, completed.stderr[-2000:]
  rows = {line.split(" | ")[0].lstrip("| "): line for line in completed.stdout.splitlines()
          if line.startswith("| ours")}
  assert set(rows) == {"ours, padded to max_seq_length (before)", "ours, dynamic padding (after)",
                       "ours, dynamic padding, bfloat16"}
  # Padding only to the request's bucket must not change what the export answers; bfloat16
  # changes it a little.
  padded, bfloat16 = re.search(r"from the dynamic float32 export: padded ([0-9.e+-]+), "
                               r"bfloat16 ([0-9.e+-]+)\.", completed.stdout).groups()
  assert float(padded) < 1e-5 and 0 < float(bfloat16) < 0.05
  assert "- CPU: " in completed.stdout
