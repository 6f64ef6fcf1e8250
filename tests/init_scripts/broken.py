"""A script that fails on import: --help exits non-zero."""

import argparse

import a_module_that_does_not_exist  # noqa: F401

argparse.ArgumentParser().parse_args()
