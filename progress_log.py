# coding=utf-8
"""Progress lines of long jobs: how much is done, the rate, the ETA, and a summary at the end.

Every long loop of the project (writing features, counting words, creating pretraining data,
extracting features) logs through one `Progress`:

  progress = Progress("Writing train.tf_record", total=len(examples), unit="examples")
  for index, example in enumerate(examples):
    ...
    progress.update(index + 1)
  progress.finish()

logs at most every `interval_seconds`

  Writing train.tf_record: 1200/5000 examples (24.0%), 400.0 examples/s, ETA 9.5 s

and at the end

  Writing train.tf_record: 5000 examples in 12.0 s (416.7 examples/s)

Amounts may be scaled for display (bytes shown as MB with `scale=1e6, unit="MB"`), a line may carry
extra counts (`detail`), and a run that resumes part-way (`initial`) rates only its own work. No
TensorFlow: data-generation workers import this.
"""

import math
import time
from typing import Optional

from absl import logging


def format_duration(seconds: float) -> str:
  """"12.3 s" under a minute, else H:MM:SS ("?" when unknown, e.g. infinite)."""
  if not math.isfinite(seconds):
    return "?"
  if seconds < 59.95:
    return "%.1f s" % max(seconds, 0.0)
  seconds = int(round(seconds))
  return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


class Progress:
  """Logs what is done of a long job, its rate and ETA at most every `interval_seconds`."""

  def __init__(self, what: str, total: Optional[float] = None, unit: str = "",
               interval_seconds: float = 10.0, scale: float = 1.0, initial: float = 0):
    """Starts the clock.

    Args:
      what: what is being done, the start of every line ("Writing features").
      total: the amount when done (in the same units as `update`'s), None when unknown (no ETA).
      unit: the name of the displayed amounts ("examples", "MB").
      interval_seconds: the least time between two progress lines.
      scale: amounts are divided by it for display (1e6 to show bytes as MB).
      initial: the amount already done before this run (a resumed job): rates count only the rest.
    """
    self.what = what
    self.total = total
    self.unit = " " + unit if unit else ""
    self.interval_seconds = interval_seconds
    self.scale = scale
    self.initial = self.done = initial
    self.start = self.last_report = time.monotonic()

  def elapsed(self) -> float:
    """Seconds since the start."""
    return time.monotonic() - self.start

  def rate(self) -> float:
    """Amount per second done by this run (in update's units, not scaled)."""
    return (self.done - self.initial) / max(self.elapsed(), 1e-9)

  def update(self, done: float, detail: str = "", force: bool = False) -> None:
    """Records that `done` is done in all; logs a line if `interval_seconds` passed (or `force`)."""
    self.done = done
    now = time.monotonic()
    if not force and now - self.last_report < self.interval_seconds:
      return
    self.last_report = now
    rate = self.rate()
    if self.total:
      eta = (self.total - done) / rate if rate > 0 else math.inf
      line = "%s: %s/%s%s (%.1f%%), %s%s/s, ETA %s" % (
          self.what, self._amount(done), self._amount(self.total), self.unit,
          100.0 * done / self.total, self._rate(rate), self.unit, format_duration(eta))
    else:
      line = "%s: %s%s, %s%s/s" % (self.what, self._amount(done), self.unit, self._rate(rate),
                                    self.unit)
    logging.info("%s%s", line, "; " + detail if detail else "")

  def finish(self, detail: str = "") -> float:
    """Logs the summary line (amount, time, rate); returns the seconds elapsed."""
    elapsed = self.elapsed()
    logging.info("%s: %s%s in %s (%s%s/s)%s", self.what, self._amount(self.done - self.initial),
                 self.unit, format_duration(elapsed), self._rate(self.rate()), self.unit,
                 "; " + detail if detail else "")
    return elapsed

  def _amount(self, value: float) -> str:
    """A displayed amount: whole unscaled numbers as integers, others as `_number`."""
    if self.scale == 1 and float(value).is_integer():
      return "%d" % value
    return _number(value / self.scale)

  def _rate(self, per_second: float) -> str:
    """A displayed rate (scaled amount per second)."""
    return _number(per_second / self.scale)


def _number(value: float) -> str:
  """Three significant digits or more: 1.50, 25.0, 416.7."""
  return "%.2f" % value if abs(value) < 10 else "%.1f" % value
