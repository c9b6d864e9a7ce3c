"""Batch judging for the offline commands: judge calls recorded, sent as provider batches, answered from results."""
