"""Processing: the span processor, the bounded evaluator worker, turn assembly and the hold."""
