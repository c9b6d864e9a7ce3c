"""The one generator of signatures from the field table: ``configure()``'s and ``ContextPrecisionProcessor``'s.

Both take the settings as ``**keywords`` validated by the table (``_config/_settings.py``) rather than spelling
them. The signature this builds gives ``help()``, IDEs and ``inspect`` the full keyword list anyway: the
function's own parameters, then each setting of the table it takes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from cp_observe._config._settings import Settings

__all__ = ["TableSignature", "table_signature"]


def table_signature(
    function: Callable[..., Any], *, processor: bool = False, skip_first: bool = False
) -> inspect.Signature:
    """``function``'s own parameters (without ``**``), then the settings it takes as keywords.

    With ``processor``, the table's ``processor=True`` settings with their defaults and types (the processor's
    keywords); else every setting defaulting to ``None`` (``configure()``: unset falls back to the environment).
    ``skip_first`` leaves out ``self`` (a class's ``__init__``, whose ``-> None`` is not the class's).
    """
    signature = inspect.signature(function)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    own = own[1:] if skip_first else own
    taken = {p.name for p in own}
    fields = Settings.model_fields
    names = Settings.processor_fields() if processor else tuple(fields)
    added = []
    for name in names:
        if name in taken:
            continue
        field = fields[name]
        if processor:
            added.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=field.default,
                                           annotation=field.annotation))
        else:
            annotation = field.annotation if field.optional else f"{field.annotation.__name__} | None"
            added.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    returns = inspect.Signature.empty if skip_first else signature.return_annotation  # a class returns itself
    return inspect.Signature([*own, *added], return_annotation=returns)


class TableSignature:
    """A class's ``__signature__``, built from the table on first read: ``__init__``'s keywords, then its settings."""

    def __get__(self, instance: object, owner: type[Any]) -> inspect.Signature:
        return table_signature(owner.__init__, processor=True, skip_first=True)  # type: ignore[misc]
