"""The offline commands' command lines (``replay``, ``report``, ``dataset``, ``calibrate``), beside ``cli.py``.

They sit together so that no package imports another's command line: the input options every offline command
shares (``_inputs.py``) live here too, and each command module calls its package's public-in-package functions.
"""
