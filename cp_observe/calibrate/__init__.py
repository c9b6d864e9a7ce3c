"""``cp-observe calibrate``: the judge against people's labels, and the MAP those labels correct.

The judge's verdicts are read back from any trace input or from Phoenix, people's labels from label files or
Phoenix annotations; matched per data source and judge, they give agreement, TPR, TNR and κ, a corrected MAP
(PPI), a page and, with ``--push``, two gauges.
"""
