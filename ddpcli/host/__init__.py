"""The host side of a launch: start torchrun, watch it, stop it, and write the run directory's records.

Builds on ddpcli.core; imports neither rich nor typer (the CLI renders what this reports through a Reporter),
and torch only lazily, to read parameter files.
"""
