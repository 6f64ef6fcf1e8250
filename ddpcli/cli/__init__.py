"""The command line: one root Typer app (app.py), one module per command, one rendering package.

Reads the pure feature packages and drives their host modules (launch, init, rundir.params); the only
layer that imports typer and rich.
"""
