"""`ddpcli init`: what kind of script it is, reading its options (script_help.py runs `--help` when that is safe),
wiring them to the plan's placeholders, and writing the experiment file (scaffold.py). No rich or typer.
"""
