"""The one generator of signatures from the field table: ``configure()``'s and ``ContextPrecisionProcessor``'s.

Both take the settings as ``**keywords`` validated by the table (``_config/_settings.py``) rather than spelling
them; the signature built here gives ``help()``, IDEs and ``inspect`` the full keyword list anyway.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from cp_observe._config._settings import Settings

__all__ = ["TableSignature", "table_signature"]


def table_signature(function: Callable[..., Any], *, processor: bool = False) -> inspect.Signature:
    """``function``'s own parameters (without ``**``), then each setting of the table it takes as a keyword.

    ``configure()``: every setting, defaulting to ``None`` (unset falls back to the environment). ``processor``:
    ``function`` is the processor's ``__init__`` (without ``self`` or its ``-> None``), and the table's
    ``processor=True`` settings come with their defaults and types.
    """
    signature = inspect.signature(function)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD][processor:]
    taken = {p.name for p in own}
    fields = Settings.model_fields
    added = []
    for name in Settings.processor_fields() if processor else fields:
        field = fields[name]
        if processor:
            default, annotation = field.default, field.annotation
        else:
            default, annotation = None, field.annotation if field.optional else f"{field.annotation.__name__} | None"
        if name not in taken:
            added.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                           annotation=annotation))
    returns = inspect.Signature.empty if processor else signature.return_annotation
    return inspect.Signature([*own, *added], return_annotation=returns)


class TableSignature:
    """A class's ``__signature__``, built from the table on first read: ``__init__``'s keywords, then its settings."""

    def __get__(self, instance: object, owner: type[Any]) -> inspect.Signature:
        return table_signature(owner.__init__, processor=True)  # type: ignore[misc]
