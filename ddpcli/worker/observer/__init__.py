"""What `ddpcli launch` puts around any training script to record what it really did, with no change to it.

torchrun's entry point becomes `python -m ddpcli.worker.observer SCRIPT ARGS...` (or `-m MODULE ARGS...`), which
installs the observation (hooks.py) and then runs the script exactly as `python SCRIPT` / `python -m MODULE` would
(entry.py). Every rank writes its own file under <run_dir>/observed/ (ddpcli.worker.stream); the host merges them
after the run (ddpcli.rundir.merge) into the run record's `observed` and `findings` and into metrics.jsonl.
"""
