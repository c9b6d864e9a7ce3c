"""Judging: the MAP core, the prompt, verdict parsing, the LLM and lexical judges and their cache."""
