"""Apps built on the real frameworks and instrumentors; they run in ``.venv-frameworks`` (see apps.py)."""
