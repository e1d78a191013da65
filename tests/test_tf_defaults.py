"""The scripts run TensorFlow's oneDNN kernels unless the user's environment says otherwise.

Checked the way a user meets it: a fresh Python process that imports a script module and then asks
TensorFlow whether it rewrites ops to oneDNN kernels.
"""
import os
import subprocess
import sys

from conftest import REPO_ROOT

_PROBE = ("import run_classifier\n"
          "from tensorflow.python.util import _pywrap_util_port\n"
          "print('oneDNN', _pywrap_util_port.IsMklEnabled())\n")


def _onednn_in_a_fresh_script_process(user_setting):
  env = dict(os.environ)
  env.pop("TF_ENABLE_ONEDNN_OPTS", None)  # conftest applied the default to this process
  if user_setting is not None:
    env["TF_ENABLE_ONEDNN_OPTS"] = user_setting
  result = subprocess.run([sys.executable, "-c", _PROBE], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, check=True)
  return [line for line in result.stdout.splitlines() if line.startswith("oneDNN ")][-1]


def test_scripts_turn_onednn_on_by_default():
  assert _onednn_in_a_fresh_script_process(None) == "oneDNN True"


def test_the_users_setting_is_kept():
  assert _onednn_in_a_fresh_script_process("0") == "oneDNN False"
