"""ctxobs — capture what an LLM agent had in its context, one snapshot per model call.

Importing this package never imports Django (tests/ctxobs/test_import_boundary.py).
"""

from ctxobs.wire import LIMITS, WIRE_VERSION

__version__ = "0.1.0"
__all__ = ["LIMITS", "WIRE_VERSION", "__version__"]
