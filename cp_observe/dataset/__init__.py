"""Failing retrievals as a test set: the dataset record, the selection, reading it from stored traces, Phoenix upload.

One JSON line per evaluation (``_record.py``) passes between ``cp-observe dataset`` (which collects stored
evaluations, ``_collect.py``, and selects them, ``_select.py``), ``load_dataset`` and ``write_eval_results``
(``_offline/``) and ``report``; ``_phoenix.py`` uploads a selection as a Phoenix dataset.
"""
