"""The run directory: its layout (layout.py, every name in one place), the typed record (record.py), metrics.jsonl,
the post-run merge of every rank's observations (merge.py). Reading and writing only: what ddpcli concludes
from a run is ddpcli.diagnosis's. Pure, but for params.py, which reads parameter files with torch inside its
functions.
"""
