"""The deploy assets shipped with the library: dashboard, alert rules, Collector configs, compose, Kubernetes.

``cp-observe deploy write DIR`` writes them from the installed version's package data, so the rules and the
dashboard always match the metric names of the library that emits them. In a wheel they live under
``cp_observe/_assets/`` (hatchling's ``force-include`` of the repository's ``deploy/`` and ``collectors/``); in a
source checkout or an editable install they are read from those two directories themselves.
"""

from __future__ import annotations

from cp_observe._errors import AssetsExistError
from cp_observe.deploy._assets import asset_files, write_assets

__all__ = ["AssetsExistError", "asset_files", "write_assets"]
