# coding=utf-8
"""The one base class of the errors a user can fix: a bad flag, file, line or request.

Every module raises its own subclass (`cli.FlagError`, `classifier.BadInputError`,
`squad.SquadFormatError`, ...), with a message that names the flag or the file (and line) at
fault and says what is allowed. `cli.run_script` prints any of them as one line,
`<script>: error: <message>`, and exits with status 1; anything else is a bug and keeps its
traceback. Errors of the libraries we call on a user's file (json, TensorFlow's readers,
safetensors, ...) are caught where the file is known and raised again as an `InputError` that
names it.
"""


class InputError(ValueError):
  """Input the user can fix; the message names the flag, file or line and what is allowed."""


def named(path: str, error: BaseException) -> str:
  """`path: <what went wrong>` for a library's error on a user's file, on one line."""
  what = str(error).strip().splitlines()
  return "%s: %s%s" % (path, type(error).__name__ + ": " if what else type(error).__name__,
                       what[0] if what else "")
