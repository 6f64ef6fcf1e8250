"""A --help that never ends and leaves a helper behind: at import it starts a helper in a session of its own that
keeps stdout and stderr open, writes both pids next to itself, and sleeps. ddpcli init must return at its
--help-timeout and leave neither running."""

import argparse
import os
import subprocess
import sys
import time

helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
with open("pids.txt", "w", encoding="utf-8") as pids:
    pids.write(f"{os.getpid()} {helper.pid}\n")
time.sleep(300)
argparse.ArgumentParser().parse_args()
