"""The command line: one root Typer app (app.py), one module per command, one rendering package.

Reads ddpcli.core and drives ddpcli.host; the only layer that imports typer and rich.
"""
