"""A script whose --help never returns in time (it sleeps before parsing)."""

import argparse
import time

time.sleep(60)
argparse.ArgumentParser().parse_args()
