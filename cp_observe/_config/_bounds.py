"""The bounds of the settings the decorators read: one table for ``Settings`` and the request-path runtime.

``Settings`` (at ``configure()``) and ``_runtime.from_environment`` (at import, on the request path) both
read ``CP_OBSERVE_SAMPLE_RATE``, ``_MAX_VALUE_LENGTH``, ``_MAX_CONTEXTS`` and ``_MAX_JUDGED_CONTEXTS``; both take
their ranges from here, so an env value one accepts the other accepts too. Each is ``(low, high)``, inclusive.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_CONTEXTS", "MAX_JUDGED_CONTEXTS", "MAX_VALUE_LENGTH", "SAMPLE_RATE"]

SAMPLE_RATE: Final = (0.0, 1.0)
MAX_VALUE_LENGTH: Final = (16, 10**9)
#: At most 28 documents: four attributes each stay under the SDK's default limit of 128 attributes per span.
MAX_CONTEXTS: Final = (1, 28)
MAX_JUDGED_CONTEXTS: Final = (1, 10**6)
