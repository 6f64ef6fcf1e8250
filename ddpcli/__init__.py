"""ddpcli: plan, launch and compare PyTorch DistributedDataParallel runs.

Importing the package stays cheap: torch is imported only by `ddpcli.runtime` and the bundled examples.
"""

__version__ = "0.1.0"
