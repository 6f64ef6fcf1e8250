"""The experiment file and its plan: the schema (schema.py), what each run resolves to (resolved.py, planning.py),
the plain-language notes and the noise-scale outlook. Pure: no torch, rich or typer; `ddpcli plan` is this package
plus a renderer.
"""
