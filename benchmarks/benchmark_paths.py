"""Where a benchmark runs: the project and `../shared` (importing this puts the project on sys.path
and applies the scripts' TensorFlow settings, `tf_defaults`, before any TensorFlow import), and
the CPU, which every table names since ratios differ several-fold between CPU kinds.

Every script here runs as `python benchmarks/<name>.py`, so this directory is first on sys.path and
`import benchmark_paths` works before any project module is imported.
"""
import os
import re
import sys

BENCHMARK_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCHMARK_DIR)
SHARED_DIR = os.path.join(os.path.dirname(REPO_ROOT), "shared")

if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)
# The scripts' TensorFlow settings, so benchmarks time the scripts' default path.
import tf_defaults  # pylint: disable=unused-import,wrong-import-position


def cpu_description() -> str:
  """The CPU's model name and the vector extensions that decide bfloat16's speed (Linux)."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as reader:
      info = reader.read()
  except OSError:
    return "unknown (no /proc/cpuinfo)"
  model = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
  flags_line = re.search(r"^flags\s*:\s*(.*)$", info, re.M)
  cpu_flags = set(flags_line.group(1).split()) if flags_line else set()
  if "amx_bf16" in cpu_flags:
    kind = "AVX-512 with AMX-BF16"
  elif "avx512_bf16" in cpu_flags:
    kind = "AVX-512 with AVX512_BF16"
  elif "avx512f" in cpu_flags:
    kind = "AVX-512 without BF16"
  else:
    kind = "AVX2 only" if "avx2" in cpu_flags else "no AVX2"
  return "%s, %s" % (model.group(1).strip() if model else "unknown model", kind)
