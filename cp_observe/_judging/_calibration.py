"""Which scored retrievals are drawn for a person to label (``calibration_rate``).

The draw is a hash of the retrieval's trace id *and* span id, salted so it is independent of the trace-id
sampling hash: each scored retrieval is drawn with probability ``rate``, independently of the others and of
whether its trace was sampled. Being a function of the ids, it is reproducible: a replay of the same traces
draws the same retrievals, and every replica of ``serve`` agrees. (Hashing the trace id alone would draw whole
traces: still unbiased for the mean, but the retrievals of one conversation would then come in clusters.)
"""

from __future__ import annotations

__all__ = ["needs_label"]

_SALT = b"cp-observe calibration v1"
_SCALE = float(1 << 64)


def needs_label(trace_id: int, span_id: int, rate: float) -> bool:
    """Whether the retrieval ``(trace_id, span_id)`` is in the ``rate`` share drawn for labelling."""
    if rate <= 0.0:
        return False
    if rate >= 1.0:
        return True
    import hashlib  # on first use: loading OpenSSL's hashes costs the host's start-up milliseconds

    digest = hashlib.blake2b(trace_id.to_bytes(16, "big") + span_id.to_bytes(8, "big"), digest_size=8,
                             key=_SALT).digest()
    return int.from_bytes(digest, "big") / _SCALE < rate
