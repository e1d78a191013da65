"""Runs every benchmark in this directory and writes their tables into one Markdown report.

Each `benchmarks/bench_*.py` is an absl program that prints a Markdown table. This script runs them one
after another (never in parallel: they measure throughput on the whole machine), copies every table
line into the report under a heading per benchmark, and starts the report with a description of the
machine. The README's benchmark table is taken from this report.

Usage: python benchmarks/run_all.py [--output=benchmarks/RESULTS.md] [--only=model,tokenization]
       [--bench_flags=model:--iterations=5]
"""

import datetime
import os
import platform
import subprocess
import sys
import time

from absl import app
from absl import flags
from absl import logging

FLAGS = flags.FLAGS

from benchmark_paths import BENCHMARK_DIR  # pylint: disable=g-import-not-at-top

flags.DEFINE_string("output", os.path.join(BENCHMARK_DIR, "RESULTS.md"),
                    "Markdown file the report is written to.")
flags.DEFINE_list("only", [],
                  "Run only these benchmarks (names without `bench_` and `.py`, e.g. `model`).")
flags.DEFINE_multi_string("bench_flags", [],
                          "Extra flags for one benchmark as `name:--flag=value` (repeatable).")


def benchmark_names() -> list[str]:
  """Names of the benchmark scripts in this directory, e.g. `model` for bench_model.py, sorted."""
  return sorted(f[len("bench_"):-len(".py")] for f in os.listdir(BENCHMARK_DIR)
                if f.startswith("bench_") and f.endswith(".py"))


def extra_flags_by_benchmark(specs: list[str], known: list[str]) -> dict[str, list[str]]:
  """Parses `name:--flag=value` items into {name: [flags]}; an unknown name is a flag error."""
  extra = {}
  for spec in specs:
    name, separator, flag = spec.partition(":")
    if not separator or name not in known:
      raise app.UsageError("--bench_flags=%r: expected `name:--flag=value` with a name among %s" %
                           (spec, ", ".join(known)))
    extra.setdefault(name, []).append(flag)
  return extra


def machine_description() -> list[str]:
  """Lines that say what the numbers were measured on."""
  cpu = platform.processor() or platform.machine()
  if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo") as cpuinfo:
      for line in cpuinfo:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
  import tensorflow as tf  # Imported here: only the report needs its version.
  return [
      "- Date: %s" % datetime.date.today().isoformat(),
      "- CPU: %s, %d cores visible, %.0f GiB memory, no accelerator" % (cpu, os.cpu_count(), memory_gib),
      "- Python %s, TensorFlow %s" % (platform.python_version(), tf.__version__),
  ]


def markdown_blocks(output_lines: list[str]) -> list[str]:
  """The Markdown lines of a benchmark's output (tables, notes, headings), with a blank line wherever
  one kind ends and another begins, so each table stays a table of its own in the report."""
  kept, previous_kind = [], None
  for line in output_lines:
    if line.startswith("|"):
      kind = "table"
    elif line.startswith(("#", "- ")):
      kind = "text"
    else:  # Log or blank lines: dropped, but they separate the blocks around them.
      previous_kind = "gap"
      continue
    if kept and kind != previous_kind:
      kept.append("")
    kept.append(line)
    previous_kind = kind
  return kept


def run_benchmark(name: str, extra_flags: list[str]) -> tuple[list[str], float, int]:
  """Runs bench_<name>.py; returns its Markdown lines (tables and notes), seconds taken, exit code."""
  command = [sys.executable, os.path.join(BENCHMARK_DIR, "bench_%s.py" % name)] + extra_flags
  logging.info("Running %s", " ".join(command))
  start = time.time()
  completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             check=False)
  seconds = time.time() - start
  lines = markdown_blocks(completed.stdout.splitlines())
  if completed.returncode != 0:
    lines.append("- failed with exit code %d; last error lines:" % completed.returncode)
    lines.extend("    " + line for line in completed.stderr.splitlines()[-5:])
  return lines, seconds, completed.returncode


def main(argv: list[str]) -> None:
  del argv  # Unused.
  names = benchmark_names()
  unknown = sorted(set(FLAGS.only) - set(names))
  if unknown:
    raise app.UsageError("--only names unknown benchmarks %s; known: %s" % (unknown, names))
  selected = [n for n in names if not FLAGS.only or n in FLAGS.only]
  extra = extra_flags_by_benchmark(FLAGS.bench_flags, names)

  report = ["# Benchmark results", ""] + machine_description() + [""]
  failures = 0
  for index, name in enumerate(selected):
    print("[%d/%d] bench_%s.py ..." % (index + 1, len(selected), name), flush=True)
    lines, seconds, returncode = run_benchmark(name, extra.get(name, []))
    failures += returncode != 0
    report += ["## bench_%s.py (%.0f s)" % (name, seconds), ""] + lines + [""]
    print("\n".join(lines), flush=True)
  with open(FLAGS.output, "w", encoding="utf-8") as report_file:
    report_file.write("\n".join(report))
  print("Wrote %s (%d benchmarks, %d failed)" % (FLAGS.output, len(selected), failures))
  if failures:
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
