"""Tests of progress_log.py: when progress lines appear and what they say (rate, ETA, summary)."""
import pytest

import progress_log


class FakeClock:
  """Stands in for time.monotonic: the test decides how much time passes."""

  def __init__(self):
    self.now = 1000.0

  def __call__(self):
    return self.now


@pytest.fixture
def clock(monkeypatch):
  fake = FakeClock()
  monkeypatch.setattr(progress_log.time, "monotonic", fake)
  return fake


@pytest.fixture
def logged(monkeypatch):
  """The logged lines (captured at the call, whatever other tests did to absl's handlers)."""
  logged = []
  monkeypatch.setattr(progress_log.logging, "info", lambda fmt, *args: logged.append(fmt % args))
  return logged


def test_lines_at_most_every_interval_with_rate_eta_and_summary(clock, logged):
  progress = progress_log.Progress("Writing x", total=1000, unit="examples", interval_seconds=10)
  clock.now += 4
  progress.update(100)  # Too soon: no line.
  assert logged == []
  clock.now += 6
  progress.update(250)  # 250 in 10 s: 25/s, 750 left: 30 s.
  clock.now += 5
  progress.update(300)  # 5 s after the last line: none.
  assert logged == ["Writing x: 250/1000 examples (25.0%), 25.0 examples/s, ETA 30.0 s"]
  clock.now += 25
  progress.update(1000)
  assert progress.finish("2 skipped") == 40
  assert logged[-1] == "Writing x: 1000 examples in 40.0 s (25.0 examples/s); 2 skipped"


def test_scaled_amounts_detail_force_and_long_eta(clock, logged):
  progress = progress_log.Progress("Reading input", total=9e9, unit="MB", scale=1e6)
  clock.now += 2
  progress.update(3e6, "7 documents", force=True)  # 1.5 MB/s; 8997 MB left: 5998 s = 1:39:58.
  assert logged == [
      "Reading input: 3.00/9000.0 MB (0.0%), 1.50 MB/s, ETA 1:39:58; 7 documents"]


def test_unknown_total_and_resumed_run(clock, logged):
  unknown = progress_log.Progress("Extracting", unit="examples", interval_seconds=0)
  clock.now += 2
  unknown.update(10)
  assert logged == ["Extracting: 10 examples, 5.00 examples/s"]
  # A run resumed at step 600 of 1000 rates only its own 100 steps in 50 s: 2/s, 300 left.
  resumed = progress_log.Progress("Training", total=1000, unit="steps", initial=600)
  clock.now += 50
  resumed.update(700, force=True)
  assert logged[-1] == "Training: 700/1000 steps (70.0%), 2.00 steps/s, ETA 0:02:30"
  resumed.finish()
  assert logged[-1] == "Training: 100 steps in 50.0 s (2.00 steps/s)"


def test_nothing_done_yet_has_an_unknown_eta(clock, logged):
  progress = progress_log.Progress("Waiting", total=5, interval_seconds=0)
  clock.now += 1
  progress.update(0)
  assert logged == ["Waiting: 0/5 (0.0%), 0.00/s, ETA ?"]
  assert progress_log.format_duration(3725) == "1:02:05"
