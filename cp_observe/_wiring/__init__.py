"""Wiring: ``configure()`` assembles the stages into the host's OpenTelemetry providers."""
