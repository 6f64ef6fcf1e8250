"""The pure core: experiment files, planning, run records, comparison and noise-scale arithmetic.

Nothing here imports torch, rich or typer (tests/test_layers.py enforces it): this is the arithmetic people get
wrong, so it must be easy to test and instant to run. The CLI (ddpcli.cli), the host side that starts and
watches torchrun (ddpcli.host) and the worker side inside training processes (ddpcli.worker) all build on it.
"""
