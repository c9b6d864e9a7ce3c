"""Capture: decorators and span readers turn a host's calls into target spans with bounded content."""
