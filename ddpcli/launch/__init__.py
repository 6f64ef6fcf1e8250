"""Launching runs: torchrun's argv and env as data (argv.py, pure), the sweep that writes each run directory
(sweep.py) and the supervisor that starts, watches and stops torchrun (supervisor.py). Neither rich nor typer: the
CLI renders what this reports through a Reporter.
"""
