"""Speed and memory of create_pretraining_data.py on a real corpus grown to several sizes.

A corpus of N MB is built from the real text by concatenating copies of it, each with its documents
in a different order, its digits renamed by a per-copy permutation of 0-9 (so "1995" becomes
another number) and the vowels of its capitalized words renamed by a per-copy permutation of
"aeiou" (so each copy has new names, as new articles of a real corpus do). Plain repetition would
keep the set of distinct words fixed, which hides whatever grows with a real corpus's vocabulary
(Heaps' law: Wikipedia's distinct words keep growing with its size); the renamed words make the
distinct words grow with the size.

Runs the command line as a user would (a fresh process per run, so start-up and vocab loading count)
with the original's flags `max_seq_length=128 max_predictions_per_seq=20 dupe_factor=5`, and reports
input MB/s, instances/s, the CPU time and the peak RSS of the whole process tree (the sum over the
main process and its workers, sampled every 20 ms; pages shared after fork count once per process,
so this is an upper bound) and its proportional set size (shared pages split between the processes).
The original script cannot be run here; the issue's measurements of it on this machine kind are
quoted in the table.

Usage: python benchmarks/bench_pretraining_data.py [--corpus=...] [--sizes_mb=1,4]
       [--num_workers=1,2] [--runs=3]
Flat memory check of issue 20: --sizes_mb=4,16,64 --num_workers=2 --runs=1
"""

import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from absl import app
from absl import flags

from benchmark_paths import REPO_ROOT, SHARED_DIR  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus", os.path.join(SHARED_DIR, "corpora", "wikitext2_valid.bert.txt"),
                    "Text in the pretraining input format.")
flags.DEFINE_string("vocab_file",
                    os.path.join(SHARED_DIR, "fixtures", "uncased_vocab", "vocab.txt"),
                    "WordPiece vocab.")
flags.DEFINE_list("sizes_mb", ["1", "4"], "Corpus sizes in MB, built from --corpus (see above).")
flags.DEFINE_list("num_workers", ["1", "2"], "Worker counts to run.")
flags.DEFINE_integer("runs", 3, "Runs per configuration; the table shows medians.")
flags.DEFINE_integer("dupe_factor", 5, "As the original's flag.")
flags.DEFINE_integer("max_seq_length", 128, "As the original's flag.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "As the original's flag.")

# The measurements of the original script on this machine kind (2 cores, English Wikipedia,
# max_seq_length=128 max_predictions_per_seq=20 dupe_factor=5).
ORIGINAL_RUNS = [(4.3, 17.3, 771, 59166), (17.3, 61.5, 1385, 241223)]


def _tree_memory_bytes(root_pid: int) -> tuple:
  """(RSS, PSS) summed over a process and all its descendants (Linux /proc).

  RSS counts pages shared after fork once per process (an upper bound); PSS splits shared pages
  between the processes sharing them (what the tree really adds to the machine).
  """
  parents = {}
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        with open("/proc/%s/stat" % entry) as stat:
          fields = stat.read().rsplit(")", 1)[1].split()
        parents[int(entry)] = int(fields[1])
      except (OSError, IndexError, ValueError):
        continue
  tree, frontier = {root_pid}, [root_pid]
  while frontier:
    parent = frontier.pop()
    children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
    tree.update(children)
    frontier.extend(children)
  rss = pss = 0
  for pid in tree:
    try:
      with open("/proc/%d/smaps_rollup" % pid) as rollup:
        for line in rollup:
          if line.startswith(("Rss:", "Pss:")):
            kilobytes = int(line.split()[1]) * 1024
            rss += kilobytes if line.startswith("Rss:") else 0
            pss += kilobytes if line.startswith("Pss:") else 0
    except (OSError, IndexError, ValueError):
      continue
  return rss, pss


def _run_once(corpus: str, num_workers: int, output_dir: str) -> tuple:
  """Runs the CLI once: (seconds, CPU seconds, peak RSS and PSS in bytes, summary), for the tree."""
  import json  # pylint: disable=g-import-not-at-top
  command = [sys.executable, os.path.join(REPO_ROOT, "create_pretraining_data.py"),
             "--input_file=" + corpus, "--vocab_file=" + FLAGS.vocab_file,
             "--output_file=%s,%s" % (os.path.join(output_dir, "a.tfrecord"),
                                      os.path.join(output_dir, "b.tfrecord")),
             "--dupe_factor=%d" % FLAGS.dupe_factor, "--max_seq_length=%d" % FLAGS.max_seq_length,
             "--max_predictions_per_seq=%d" % FLAGS.max_predictions_per_seq,
             "--masked_lm_prob=0.15", "--random_seed=12345", "--do_lower_case=true",
             "--num_workers=%d" % num_workers]
  start = time.perf_counter()
  cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
  process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  peak = [0, 0]

  def sample():
    while process.poll() is None:
      rss, pss = _tree_memory_bytes(process.pid)
      peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
      time.sleep(0.02)

  sampler = threading.Thread(target=sample)
  sampler.start()
  stdout, _ = process.communicate()
  seconds = time.perf_counter() - start
  sampler.join()
  cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # Includes the reaped workers.
  cpu_seconds = (cpu_after.ru_utime + cpu_after.ru_stime
                 - cpu_before.ru_utime - cpu_before.ru_stime)
  if process.returncode != 0:
    raise RuntimeError("create_pretraining_data.py failed: %s" % " ".join(command))
  return seconds, cpu_seconds, peak[0], peak[1], json.loads(stdout)


def write_grown_corpus(text: bytes, megabytes: float, path: str) -> int:
  """Writes about `megabytes` of corpus built from `text` (documents separated by blank lines).

  Copy 0 is the text itself; copy k > 0 has its documents shuffled by seed k, its digits renamed by
  a permutation of 0-9 and the vowels of capitalized words by a permutation of "aeiou", both drawn
  with seed k. Returns the bytes written.
  """
  documents = [document.strip(b"\n") + b"\n\n" for document in re.split(rb"\n\s*\n", text)
               if document.strip()]
  target, written, copy = int(megabytes * 1e6), 0, 0
  with open(path, "wb") as writer:
    while written < target:
      rng = random.Random(copy)
      order = list(range(len(documents)))
      digits, vowels = list(b"0123456789"), list(b"aeiou")
      if copy:
        rng.shuffle(order)
        rng.shuffle(digits)
        rng.shuffle(vowels)
      digit_renaming = bytes.maketrans(b"0123456789", bytes(digits))
      vowel_renaming = bytes.maketrans(b"aeiou", bytes(vowels))
      for index in order:
        document = re.sub(rb"\b[A-Z][a-z]+", lambda word: word.group(0).translate(vowel_renaming),
                          documents[index].translate(digit_renaming))
        writer.write(document)
        written += len(document)
        if written >= target:
          break
      copy += 1
  return written


def main(_):
  with open(FLAGS.corpus, "rb") as reader:
    text = reader.read()
  print("| corpus | input MB | workers | seconds | input MB/s | instances | instances/s "
        "| CPU s, process tree | input MB/s per core (MB per CPU s) | peak RSS, process tree (MB) "
        "| peak PSS, process tree (MB) |")
  print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
  peak_rss_by_workers = {}
  with tempfile.TemporaryDirectory() as temp_dir:
    for size in map(float, FLAGS.sizes_mb):
      corpus = os.path.join(temp_dir, "corpus_%gmb.txt" % size)
      megabytes = write_grown_corpus(text, size, corpus) / 1e6
      for num_workers in map(int, FLAGS.num_workers):
        runs = [_run_once(corpus, num_workers, temp_dir) for _ in range(FLAGS.runs)]
        seconds = statistics.median(run[0] for run in runs)
        cpu_seconds = statistics.median(run[1] for run in runs)
        rss_mb = statistics.median(run[2] for run in runs) / 1e6
        peak_rss_by_workers.setdefault(num_workers, []).append((size, rss_mb))
        pss_mb = statistics.median(run[3] for run in runs) / 1e6
        instances = runs[0][4]["instances"]
        os.remove(os.path.join(temp_dir, "a.tfrecord"))
        os.remove(os.path.join(temp_dir, "b.tfrecord"))
        print("| %s grown to %g MB | %.2f | %d | %.2f | %.2f | %d | %.0f | %.2f | %.2f | %.0f "
              "| %.0f |" % (
            os.path.basename(FLAGS.corpus), size, megabytes, num_workers, seconds,
            megabytes / seconds, instances, instances / seconds, cpu_seconds,
            megabytes / cpu_seconds, rss_mb, pss_mb))
        sys.stdout.flush()
      os.remove(corpus)
  for megabytes, seconds, peak_mb, instances in ORIGINAL_RUNS:
    print("| original script (quoted from the issue, Wikipedia text) | %.1f | 1 | %.1f | %.2f | %d "
          "| %.0f | | | %d | |" % (megabytes, seconds, megabytes / seconds, instances,
                             instances / seconds, peak_mb))
  print()
  for num_workers, peaks in peak_rss_by_workers.items():
    (first_size, first_rss), (last_size, last_rss) = peaks[0], peaks[-1]
    print("- %d worker(s): peak RSS %+.1f%% from %g MB to %g MB of input (issue 20: within 10%%)."
          % (num_workers, 100 * (last_rss / first_rss - 1), first_size, last_size))
  print("- Flags: max_seq_length=%d max_predictions_per_seq=%d dupe_factor=%d, two output files; "
        "medians of %d runs; each run is a fresh process (start-up included)."
        % (FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, FLAGS.dupe_factor, FLAGS.runs))
  print("- CPU s is user + system time of the main process and its workers: on a busy machine it "
        "is a steadier measure than the wall time.")


if __name__ == "__main__":
  app.run(main)
