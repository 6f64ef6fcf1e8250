"""The run directory: its layout (layout.py, every name in one place), the typed record (record.py), metrics.jsonl,
the post-run merge of every rank's observations (merge.py) and the findings on them (findings.py). Pure, but for
params.py, which reads parameter files with torch inside its functions.
"""
