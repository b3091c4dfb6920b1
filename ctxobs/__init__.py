"""ctxobs — capture what an LLM agent had in its context, one snapshot per model call.

    import ctxobs
    obs = ctxobs.Client()              # CTXOBS_ENDPOINT / CTXOBS_API_KEY
    with obs.turn(session_id="s1", model="gpt-4o") as t:
        t.block("system", [{"role": "system", "content": SYSTEM}], pinned=True)
        t.block("user", [{"role": "user", "content": question}])
        t.output(llm.chat.completions.create(**t.request()))

or `ctxobs.instrument_openai(llm)` to record every call without changing the agent.
Importing this package never imports Django (tests/ctxobs/test_import_boundary.py).
"""

from ctxobs.client import (
    Client,
    InvalidSnapshot,
    SessionContext,
    Turn,
    current_session,
    default_client,
    redact_snapshot,
    session,
    tag,
)
from ctxobs.instrument import default_partitioner, instrument_openai, uninstrument_openai
from ctxobs.instrument_anthropic import instrument_anthropic, uninstrument_anthropic
from ctxobs.transport import CtxobsDeliveryError, Transport
from ctxobs.validate import validate_snapshot
from ctxobs.wire import LIMITS, WIRE_VERSION

__version__ = "0.1.0"
__all__ = [
    "LIMITS",
    "WIRE_VERSION",
    "Client",
    "CtxobsDeliveryError",
    "InvalidSnapshot",
    "SessionContext",
    "Transport",
    "Turn",
    "__version__",
    "current_session",
    "default_client",
    "default_partitioner",
    "instrument_anthropic",
    "instrument_openai",
    "redact_snapshot",
    "session",
    "tag",
    "uninstrument_anthropic",
    "uninstrument_openai",
    "validate_snapshot",
]
