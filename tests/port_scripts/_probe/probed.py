"""`python probed.py SCRIPT ARGS`: SCRIPT run as `python SCRIPT ARGS` runs it, with the probe (sitecustomize) applied
first. For a process forked from tests/zygote.py, whose interpreter imported torch (and ran sitecustomize, a no-op)
before this run's PORT_PROBE_DIR and switches were set: the probe is run again, now with them."""

import importlib
import runpy
import sys
from pathlib import Path

import sitecustomize

importlib.reload(sitecustomize)
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = str(Path(script).resolve().parent)
runpy.run_path(script, run_name="__main__")
