"""Emission: one evaluation out as a span, a log record, metrics, exemplars and sink deliveries."""
