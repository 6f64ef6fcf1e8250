"""Stand-in (ours): the package of handed_tuple_project (see train.py)."""
