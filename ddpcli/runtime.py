"""The public name of the helper training scripts import (`from ddpcli import runtime`).

The code lives on the worker side of the tree, in ddpcli/worker/runtime/; this module keeps the short import
that scripts and the README use.
"""

from ddpcli.worker.runtime import *  # noqa: F403
from ddpcli.worker.runtime import __all__  # noqa: F401
