"""Configuration and the process-wide state every stage reads: settings, env vars, runtime, sampling gates."""
