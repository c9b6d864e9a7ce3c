"""Spans read from outside: OTLP protobuf and JSON, trace files, Jaeger, Tempo, Phoenix, and SDK spans from them.

Every offline command reads its input here (``Source``: a file or a query API, yielding OTLP trace requests),
and ``serve`` converts what it receives to SDK spans with the same ``spans_from_request``. One OTLP/JSON
decoder (``_otlp_json.py``), one time parser (``_time.py``) and one builder of sources from input options
(``_inputs.py``) serve them all.
"""
