"""An argparse script whose --help prints 50 MB (in 1 MB writes): ddpcli init must read it with bounded memory."""

import argparse
import sys

if "--help" in sys.argv:
    line = "  --option-%07d VALUE   " + "x" * 40 + "\n"
    chunk = "".join(line % index for index in range(16000))
    for _ in range(50):
        sys.stdout.write(chunk)
    sys.stdout.flush()
    sys.exit(0)
argparse.ArgumentParser().parse_args()
