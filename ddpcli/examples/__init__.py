"""Training scripts bundled with ddpcli, runnable with `python -m ddpcli.examples.<name>` or `ddpcli launch`.

They import torch at module level; nothing in ddpcli imports them.
"""
