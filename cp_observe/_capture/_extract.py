"""Retrieved contexts from what retrievers really return, recognised by shape, importing no RAG library.

It runs on the request path of every decorated retriever: items dispatch on their exact type first, and the
attribute names an object's class can have are worked out once per class, so reading a document costs a few
hits and no misses (a miss on a pydantic model raises inside ``__getattr__``: microseconds). Each item is
read on its own; one that cannot be read becomes ``"<unrepresentable TYPE>"`` rather than vanishing.

Shapes, in order of precedence:

- ``None``: nothing. ``str``: one context. ``bytes``/``bytearray``/``memoryview``: one, decoded as UTF-8.
- A mapping or object holding a list under ``documents`` | ``contexts`` | ``context`` | ``source_documents``
  | ``source_nodes`` | ``nodes`` | ``results`` | ``matches`` | ``hits`` (first found; for a mapping without
  text keys, also up to two mappings down: ``{"hits": {"hits": [...]}}``, Haystack's ``{"retriever":
  {"documents": [...]}}``): that list's items. A wrapper wins over text: LlamaIndex's ``Response`` gives
  its ``source_nodes``, not its answer.
- Any other mapping is one document. Text: ``page_content`` | ``text`` | ``content`` | ``document`` (a
  string, or a mapping with a text key: Cohere rerank) | ``_source``'s text key (Elasticsearch) | the text
  key of its metadata (Pinecone, Qdrant) | else the mapping as JSON. Id: ``id`` | ``doc_id`` | ``node_id`` |
  ``_id``. Score: ``score`` | ``relevance_score`` | ``similarity`` | ``similarity_score`` | ``_score``.
  Metadata: ``metadata`` | ``meta`` | ``payload``. A ``distance`` is not a score (lower is better, so it
  would read upside down next to scores): without a score it is added to the metadata instead.
- A LlamaIndex ``NodeWithScore`` (``node`` and ``score``): its node's text, id and metadata, its own score.
- A document object. Text: ``page_content`` (LangChain) | ``text`` (LlamaIndex ``TextNode``) | ``content``
  (Haystack) | ``get_content()`` (other LlamaIndex nodes) | its metadata's text key | else ``str(obj)``.
  Id: ``id`` | ``id_`` | ``node_id`` | ``doc_id``. Score: ``score`` | ``relevance_score`` | ``similarity``.
  Metadata: ``metadata`` | ``meta`` | ``payload``.
- A pair ``(doc, number)`` or ``[doc, number]`` (``similarity_search_with_score``): the doc, that score.
- Any other list, tuple or collection: its items. A list or tuple item is flattened once (per-query
  batches); anything nested deeper becomes one context of JSON text.
- An iterator or generator, returned directly or held under a wrapper name: ``NOT_CAPTURED``. It is the
  host's own and reading it would empty it for the caller, so it is never iterated.
- Anything else: one context of ``safe_str`` of it.

Names are read from the class (properties, slots, dataclass / pydantic / attrs fields) and, for classes that
declare no fields, from the instance ``__dict__``. Attributes only ``__getattr__`` serves (proxies, mocks)
are not seen: such objects become text.
"""

from __future__ import annotations

import inspect
import operator
import types
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, TypeAlias

from cp_observe._capture._serialize import MAX_JUDGED_CHARS, as_limit, finite_float, safe_text, truncate, type_name
from cp_observe._internal import report_host_error

__all__ = ["NOT_CAPTURED", "Context", "ExtractedContexts", "extract_contexts"]

_TEXT_NAMES: Final = ("page_content", "text", "content")
_ID_KEYS: Final = ("id", "doc_id", "node_id", "_id")
_ID_ATTRS: Final = ("id", "id_", "node_id", "doc_id")
_SCORE_KEYS: Final = ("score", "relevance_score", "similarity", "similarity_score", "_score")
_SCORE_ATTRS: Final = ("score", "relevance_score", "similarity")
_META_NAMES: Final = ("metadata", "meta", "payload")
_WRAPPERS: Final = (
    *("documents", "contexts", "context", "source_documents", "source_nodes", "nodes", "results"),
    *("matches", "hits"),  # Pinecone, Elasticsearch
)
_ROLES: Final = (_TEXT_NAMES, _ID_ATTRS, _SCORE_ATTRS, _META_NAMES, _WRAPPERS)  # the order of _Plan's fields
_DOC_NAMES: Final = frozenset((*_TEXT_NAMES, *_ID_ATTRS, *_SCORE_ATTRS, *_META_NAMES, "node", "get_content"))
_TEXT_TYPES: Final = (str, bytes, bytearray, memoryview)
_OBJECT: Final = "object"
_MAPPING: Final = "mapping"
_TEXT: Final = "text"
_ID_LIMIT: Final = 256
_MAX_FANOUT: Final = 16  # values of a mapping searched for a nested wrapper
_PLAN_CACHE_MAX: Final = 1_024
_MISSING: Final[Any] = object()
_FAILED: Final[Any] = object()
_NO_ATTRS: Final[dict[str, Any]] = {}  # read only

Score: TypeAlias = "float | None"


class Context(NamedTuple):
    """One retrieved piece, in rank order (immutable; a named tuple, which is the cheapest object to build).

    Attributes:
        text: the text the judge reads, at most ``max_chars`` plus a truncation marker.
        id: the document id the retriever reported, as a string (at most 256 characters).
        score: the retriever's score, finite, when it reported one.
        metadata: the document's metadata mapping as the retriever returned it (not copied; serialise it
            with ``metadata_json`` when recording it).
    """

    text: str
    id: str | None = None
    score: float | None = None
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ExtractedContexts:
    """The contexts found in a retriever's return value, and what the bounds left out.

    Attributes:
        contexts: at most ``max_items`` contexts, in the order the retriever returned them.
        total: how many items the value held, ``len(contexts) + dropped``; ``None`` when unknown (an
            iterator not read to its end, or one that raised). ``None`` items are skipped and not counted,
            except in the unread tail of a sequence, where each element counts as one.
        dropped: items beyond ``max_items`` (for an unfinished iterator, those seen: a lower bound).
        truncated: how many context texts were cut to ``max_chars``.
    """

    contexts: tuple[Context, ...]
    total: int | None
    dropped: int = 0
    truncated: int = 0


# A frozen dataclass's __init__ calls object.__setattr__ once per field; setting the slots through their
# descriptors builds the same (still frozen) object about three times faster, and this is the hot path.
_new = object.__new__
_tuple_new = tuple.__new__
_SET_ALL, _SET_TOTAL, _SET_DROPPED, _SET_CUT = (
    ExtractedContexts.__dict__[f].__set__ for f in ("contexts", "total", "dropped", "truncated")
)


def _make(text: str, ident: str | None = None, score: Score = None, meta: Mapping[str, Any] | None = None) -> Context:
    return _tuple_new(Context, (text, ident, score, meta))


def _result(contexts: tuple[Context, ...], total: int | None, dropped: int, truncated: int) -> ExtractedContexts:
    result: ExtractedContexts = _new(ExtractedContexts)
    _SET_ALL(result, contexts)
    _SET_TOTAL(result, total)
    _SET_DROPPED(result, dropped)
    _SET_CUT(result, truncated)
    return result


def extract_contexts(value: object, *, max_items: int = 100, max_chars: int = MAX_JUDGED_CHARS) -> ExtractedContexts:
    """Return the retrieved contexts in ``value``, bounded, in rank order; never raises.

    Host objects are only read: an iterator (a generator, say) reached directly or under a wrapper name is
    never iterated; the result is then ``NOT_CAPTURED``. (The decorators hand a decorated generator's kept
    items over as a list.)

    Args:
        value: what a retriever returned; see the module docstring for the shapes recognised.
        max_items: the most contexts to return; the rest are counted in ``dropped``.
        max_chars: the most characters of one context's text; longer ones are cut and counted.
    """
    try:
        return _extract(value, as_limit(max_items, 100), as_limit(max_chars, MAX_JUDGED_CHARS))
    except Exception:  # noqa: BLE001 - a bug of ours: record nothing rather than break the host
        return ExtractedContexts((), None)


def _extract(value: object, max_items: int, max_chars: int) -> ExtractedContexts:
    cls = type(value)
    if (cls is list or cls is tuple) and not _is_pair(value):  # type: ignore[arg-type]
        return _walk(value, len(value), max_items, max_chars)  # type: ignore[arg-type]
    if value is None:
        return _EMPTY
    kind = _MAPPING if cls is dict else _TEXT if cls is str or cls is list or cls is tuple else _plan(cls).kind
    if kind is _MAPPING:
        items = _unwrap(value, 0)  # type: ignore[arg-type]
        if items is _ITERATOR:
            return NOT_CAPTURED
        if items is not None:
            return _walk(items, len(items), max_items, max_chars)
    elif kind is _OBJECT:
        plan = _plan(cls)
        attrs = _instance_dict(value) if plan.use_dict else _NO_ATTRS
        for name in plan.wrappers:
            inner = _read(value, attrs, plan, name)
            if type(inner) is list or type(inner) is tuple:
                return _walk(inner, len(inner), max_items, max_chars)
            if isinstance(inner, Iterator):
                return NOT_CAPTURED
        if not (plan.document or (plan.use_dict and not _DOC_NAMES.isdisjoint(attrs))):  # maybe a collection
            if isinstance(value, Iterator):
                return NOT_CAPTURED
            if isinstance(value, Collection):
                return _walk(value, _size(value), max_items, max_chars)
    cut = [0]
    context = _context(value, max_chars, cut)
    if context is None:
        return _EMPTY
    return _result((), 1, 1, 0) if max_items == 0 else _result((context,), 1, 0, cut[0])


_EMPTY: Final = ExtractedContexts((), 0)
#: The value is (or wraps) an iterator of the host's: not read, so nothing was captured.
NOT_CAPTURED: Final = ExtractedContexts((), None)
_ITERATOR: Final[Any] = object()  # _unwrap's answer for an iterator under a wrapper key


def _walk(items: Iterable[Any], size: int | None, max_items: int, max_chars: int) -> ExtractedContexts:
    """Extract the items of a sequence or iterator, reading at most ``max_items + 1`` of them."""
    out: list[Context] = []
    append = out.append
    cut = [0]
    dropped = visits = 0
    more = False  # whether an iterator may hold items we did not read
    try:
        for item in items:
            visits += 1
            if len(out) >= max_items:
                dropped += _count(item)
                more = True
                break
            cls = type(item)
            if cls is str and len(item) <= max_chars:  # the commonest item, inlined
                append(_make(item))
            elif (cls is tuple or cls is list) and _is_pair(item):  # (doc, score)
                context = _context(item[0], max_chars, cut, finite_float(item[1]), nested=True)
                if context is not None:
                    append(context)
            elif cls is list or cls is tuple:
                for position, sub in enumerate(item):
                    if len(out) >= max_items:
                        dropped += len(item) - position
                        break
                    context = _context(sub, max_chars, cut)
                    if context is not None:
                        append(context)
            else:
                # Documents of a kind seen before (a dict of the same keys, a class of plain fields): one
                # read of their fields, else the general reader.
                context = None
                if cls is dict:
                    context = _from_dict(item, max_chars, cut)
                else:
                    plan = _PLANS.get(cls)
                    if plan is not None:
                        if plan.fast is not None:
                            context = _from_fields(item, plan.fast, max_chars, cut, None)
                        elif plan.node_score is not None:  # a NodeWithScore: its node, its own score
                            context = _from_node(item, plan.node_score, max_chars, cut)
                if context is None:
                    context = _context(item, max_chars, cut)
                if context is not None:
                    append(context)
            if visits > max_items:  # None items or empty lists seen: stop reading anyway
                more = True
                break
    except Exception:  # noqa: BLE001 - an iterator raising half-way: keep what we have
        size, more = None, True
    if size is not None:
        dropped += max(size - visits, 0)
        return _result(tuple(out), len(out) + dropped, dropped, cut[0])
    return _result(tuple(out), None if more else len(out) + dropped, dropped, cut[0])


def _count(item: object) -> int:
    if item is None:
        return 0
    return len(item) if (type(item) is list or type(item) is tuple) and not _is_pair(item) else 1


def _size(value: object) -> int | None:
    try:
        return operator.index(len(value))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a broken __len__: read it like an iterator
        return None


def _is_number(value: object) -> bool:
    cls = type(value)
    if cls is float or cls is int:
        return True
    if cls is bool or cls is str or cls is dict or value is None:
        return False
    return _plan(cls).number


def _is_pair(value: list[Any] | tuple[Any, ...]) -> bool:
    return len(value) == 2 and _is_number(value[1]) and not _is_number(value[0])


def _unwrap(mapping: Mapping[Any, Any], depth: int) -> list[Any] | tuple[Any, ...] | None:
    """Find the list a mapping wraps: under a wrapper key, or (unless it is a document) one mapping down."""
    get = mapping.get
    for key in _WRAPPERS:
        inner = get(key)
        if type(inner) is list or type(inner) is tuple:
            return inner
        if inner is not None and isinstance(inner, Iterator):
            return _ITERATOR  # type: ignore[no-any-return]
    if depth >= 2 or _first(get, _TEXT_NAMES) is not None:
        return None
    for count, inner in enumerate(mapping.values()):  # {"hits": {"hits": ...}}, {"retriever": {"documents": ...}}
        if count >= _MAX_FANOUT:
            break
        found = _unwrap(inner, depth + 1) if isinstance(inner, Mapping) else None
        if found is not None:
            return found
    return None


def _context(item: object, max_chars: int, cut: list[int], score: Score = None, nested: bool = False) -> Context | None:
    """Return one item's context (``score`` overrides its own), a placeholder when it cannot be read."""
    try:
        cls = type(item)
        if cls is str:
            return _make(_text(item, max_chars, cut), None, score)
        if cls is dict:
            return _from_mapping(item, max_chars, cut, score)  # type: ignore[arg-type]
        if item is None:
            return None
        if cls is list or cls is tuple:
            if not nested and _is_pair(item):  # type: ignore[arg-type]
                return _context(item[0], max_chars, cut, finite_float(item[1]), nested=True)  # type: ignore[index]
            return _make(_text(item, max_chars, cut), None, score)  # a list nested too deep: its JSON text
        plan = _plan(cls)
        if plan.kind is _OBJECT:
            return _from_object(item, plan, max_chars, cut, score=score, nested=nested)
        if plan.kind is _MAPPING:
            return _from_mapping(item, max_chars, cut, score)  # type: ignore[arg-type]
        return _make(_text(item, max_chars, cut), None, score)  # str and bytes subclasses, numbers
    except Exception:  # noqa: BLE001 - one bad item: say so, never drop it silently
        return _make(_text(f"<unrepresentable {type_name(item)}>", max_chars, cut))


#: Which keys a dict of one key set is read by, as the tuple ``(text, meta, meta_more, score, score_more, ident,
#: ident_more)``: the first present name of each role, and whether more follow (``score_more`` also when
#: "distance" is present, read when there is no score). ``_from_mapping`` reads each role's names in order and
#: takes the first that is not ``None``; with the key set known, the names absent from it read ``None``, so
#: reading only the first present one gives the same answer whenever it is not ``None`` or no other name of the
#: role is present. A plain tuple, unpacked once per document.
_Keys = tuple[str, str | None, bool, str | None, bool, str | None, bool]


_KEY_PLANS: dict[tuple[Any, ...], _Keys | None] = {}  # bounded like _PLANS; dict stores are atomic
_KEY_PLAN_MAX_KEYS: Final = 16


def _from_dict(doc: dict[Any, Any], max_chars: int, cut: list[int]) -> Context | None:
    """``_from_mapping``'s answer for a plain dict of a key set seen before, or ``None`` when only it can tell."""
    try:
        if len(doc) > _KEY_PLAN_MAX_KEYS:
            return None
        shape = tuple(doc)
        keys = _KEY_PLANS.get(shape, _MISSING)
        if keys is _MISSING:
            keys = _key_plan(shape)
            if len(_KEY_PLANS) < _PLAN_CACHE_MAX:
                _KEY_PLANS[shape] = keys
        if keys is None:
            return None
        text_key, meta_key, meta_more, score_key, score_more, ident_key, ident_more = keys
        get = doc.get
        text = get(text_key)
        if type(text) is not str:
            return None
        meta = get(meta_key) if meta_key is not None else None
        if meta is None:
            if meta_more:
                return None
        elif type(meta) is dict:
            meta = meta or None
        else:
            meta = _meta(meta)
        score = None
        if score_key is not None:
            own = get(score_key)
            if own is not None:
                score = own if type(own) is float and own - own == 0.0 else finite_float(own)
        if score is None and score_more:
            return None
        ident = get(ident_key) if ident_key is not None else None
        if ident is None:
            if ident_more:
                return None
        elif type(ident) is not str or not ident or len(ident) > _ID_LIMIT:
            ident = _ident(ident)
        if len(text) > max_chars:
            text = _text(text, max_chars, cut)
        return _tuple_new(Context, (text, ident, score, meta))
    except Exception:  # noqa: BLE001 - odd keys (a raising __hash__), say: the general reader copes
        return None


def _key_plan(shape: tuple[Any, ...]) -> _Keys | None:
    present = set(shape)

    def first(names: tuple[str, ...]) -> tuple[str | None, bool]:
        found = [name for name in names if name in present]
        return (found[0] if found else None), len(found) > 1

    text, _ = first(_TEXT_NAMES)  # the first text key decides when its value is a string
    if text is None:
        return None  # no text key: the general reader looks further (document, _source, the metadata)
    meta, meta_more = first(_META_NAMES)
    score, score_more = first(_SCORE_KEYS)
    ident, ident_more = first(_ID_KEYS)
    return (text, meta, meta_more, score, score_more or "distance" in present, ident, ident_more)


def _from_mapping(doc: Mapping[Any, Any], max_chars: int, cut: list[int], score: Score) -> Context:
    get = doc.get
    text = get("page_content")
    if text is None:
        text = _first(get, _TEXT_NAMES)
    meta = get("metadata")
    meta = _meta(meta if meta is not None else _first(get, _META_NAMES))
    if score is None:
        score = finite_float(_first(get, _SCORE_KEYS))
        distance = None if score is not None else get("distance")
        if distance is not None:
            meta = {**meta, "distance": distance} if meta else {"distance": distance}
    if text is None:
        for key in ("document", "_source"):
            inner = get(key)
            if type(inner) is str:
                text = inner
            elif isinstance(inner, Mapping):  # Cohere rerank {"document": {"text"}}, Elasticsearch "_source"
                text = _first(inner.get, _TEXT_NAMES)
            if text is not None:
                break
        if text is None and meta is not None:
            text = _first(meta.get, _TEXT_NAMES)
    return _make(_text(doc if text is None else text, max_chars, cut), _ident(_first(get, _ID_KEYS)), score, meta)


def _first(get: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = get(key)
        if value is not None:
            return value
    return None


def _from_object(obj: object, plan: _Plan, max_chars: int, cut: list[int], *, score: Score, nested: bool) -> Context:
    fast = plan.fast
    if fast is not None:
        context = _from_fields(obj, fast, max_chars, cut, score)
        if context is not None:
            return context
    attrs = _instance_dict(obj) if plan.use_dict else _NO_ATTRS
    own: Any = _MISSING
    if plan.node and not nested:  # a NodeWithScore: its node (read one level down only), its own score
        node = _read(obj, attrs, plan, "node")
        own = _read(obj, attrs, plan, "score")
        if own is not _MISSING and node is not None and node is not _MISSING and node is not _FAILED:
            context = _context(node, max_chars, cut, score if score is not None else finite_float(own), nested=True)
            if context is not None:
                return context
    failed = False
    text = None
    for name in plan.text:
        value = _read(obj, attrs, plan, name)
        if value is _FAILED:
            failed = True
        elif type(value) is str or (value is not _MISSING and value is not None and not callable(value)):
            text = value
            break
    if text is None and plan.get_content:
        try:
            text = obj.get_content()  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - LlamaIndex raises for nodes it cannot render
            report_host_error("get_content()", exc)  # the last way to its text: a placeholder is recorded
            failed = True
    meta = _meta(_first_attr(obj, attrs, plan, plan.metas))
    if text is None and meta is not None:
        text = _first(meta.get, _TEXT_NAMES)
    if text is None:
        text = f"<unrepresentable {type_name(obj)}>" if failed else obj
    if score is None and own is not _MISSING and own is not _FAILED and own is not None:
        score = finite_float(own)  # "score" was read above: never read a property twice in one call
    elif score is None and plan.scores:
        names = plan.scores if own is _MISSING else tuple(name for name in plan.scores if name != "score")
        score = finite_float(_first_attr(obj, attrs, plan, names))
    return _make(_text(text, max_chars, cut), _ident(_first_attr(obj, attrs, plan, plan.ids)), score, meta)


#: How to read a document class whose text is a plain field: one ``attrgetter`` for every role, as the tuple
#: ``(read, id_at, score_at, meta_at, id_more, score_more, meta_more)``. ``read`` returns ``(text, ...)``: the
#: first name of each role (text, id, score, metadata) when it is a plain field; ``*_at`` is that role's position
#: in the tuple, 0 when its first name is not a plain field or it has none, and ``*_more`` whether the role has
#: further names, which only the general reader tries (it does when the first is ``None``). Reading plain fields
#: runs no code of the host's, so reading them all at once gives exactly what the general reader's name-by-name
#: reads give. A plain tuple, unpacked once per document.
_Fields = tuple[Callable[[object], Any], int, int, int, bool, bool, bool]


def _from_fields(obj: object, f: _Fields, max_chars: int, cut: list[int], score: Score) -> Context | None:
    """The general reader's answer for a plain-field document, or ``None`` when only it can tell."""
    read, id_at, score_at, meta_at, id_more, score_more, meta_more = f
    try:
        values = read(obj)
    except Exception:  # noqa: BLE001 - an unset slot, say: the general reader copes
        return None
    text = values[0]
    if type(text) is not str:
        return None  # None (then get_content() or the metadata), or a non-text value: the general rules
    ident = values[id_at] if id_at else None
    if ident is None:
        if id_more:
            return None
    elif type(ident) is not str:
        if callable(ident):
            return None
        ident = _ident(ident)
    elif not ident or len(ident) > _ID_LIMIT:
        ident = _ident(ident)
    if score is None:
        own = values[score_at] if score_at else None
        if own is None:
            if score_more:
                return None
        elif type(own) is float:
            score = own if own - own == 0.0 else None  # NaN and infinities fail this
        elif callable(own):
            return None
        else:
            score = finite_float(own)
    meta = values[meta_at] if meta_at else None
    if meta is None:
        if meta_more:
            return None
    elif type(meta) is dict:
        meta = meta or None
    elif callable(meta):
        return None
    else:
        meta = _meta(meta)
    if len(text) > max_chars:
        text = _text(text, max_chars, cut)
    return _tuple_new(Context, (text, ident, score, meta))


def _from_node(obj: object, node_score: Callable[[object], Any], max_chars: int, cut: list[int]) -> Context | None:
    """A NodeWithScore of plain fields whose node is a plain-field document, else ``None`` (the general reader)."""
    try:
        node, own = node_score(obj)
        plan = _PLANS.get(type(node))
        if plan is None or plan.fast is None or own is None:
            return None
        return _from_fields(node, plan.fast, max_chars, cut, finite_float(own))
    except Exception:  # noqa: BLE001 - the general reader copes
        return None


def _fields_reader(cls: type, roles: tuple[tuple[str, ...], ...], declared: frozenset[str]) -> _Fields | None:
    """A ``_Fields`` for ``cls`` when the first name of its text role is a plain field, else ``None``."""
    try:
        if cls.__getattribute__ is not object.__getattribute__:  # type: ignore[comparison-overlap]
            return None  # every attribute read runs the class's own code
        plain = [bool(role) and role[0] in declared and _plain_field(cls, role[0]) for role in roles]
        if not plain[0]:
            return None  # the text's first name is a property or method, or there is none
        names: list[str] = []
        at: list[int] = []  # position in the getter's tuple; 0 (the text's) means "not read here"
        for role, readable in zip(roles, plain, strict=True):
            at.append(len(names) if readable else 0)
            if readable:
                names.append(role[0])
        # A role the getter cannot settle: it has names after the first, or its first is not a plain field.
        more = [len(role) > 1 or (bool(role) and not readable) for role, readable in zip(roles, plain, strict=True)]
        getter = operator.attrgetter(*names)
        read = getter if len(names) > 1 else lambda obj: (getter(obj),)
        return (read, at[1], at[2], at[3], more[1], more[2], more[3])
    except Exception:  # noqa: BLE001 - an odd class: the general reader
        return None


def _plain_fields(cls: type, names: tuple[str, ...], declared: frozenset[str]) -> bool:
    try:
        return cls.__getattribute__ is object.__getattribute__ and all(  # type: ignore[comparison-overlap]
            name in declared and _plain_field(cls, name) for name in names
        )
    except Exception:  # noqa: BLE001 - an odd class: the general reader
        return False


def _plain_field(cls: type, name: str) -> bool:
    """A declared field whose class attribute is absent, a slot, or a plain default: reading it runs no code."""
    static = inspect.getattr_static(cls, name, None)
    return static is None or type(static) is types.MemberDescriptorType or not hasattr(type(static), "__get__")


def _first_attr(obj: object, attrs: Mapping[str, Any], plan: _Plan, names: tuple[str, ...]) -> Any:
    for name in names:
        if name in plan.declared:  # _read, inlined: this runs a few times per document
            try:
                value = getattr(obj, name, None)
            except Exception:  # noqa: BLE001 - a property that raises: try the next name
                continue
        else:
            value = attrs.get(name)
        if value is not None and not callable(value):
            return value
    return None


def _read(obj: object, attrs: Mapping[str, Any], plan: _Plan, name: str) -> Any:
    """Read ``obj.name``: declared names through ``getattr``, others from the instance ``__dict__``."""
    if name in plan.declared:
        try:
            return getattr(obj, name, _MISSING)
        except Exception:  # noqa: BLE001 - a raising property (NodeWithScore.text of an image): routine, try others
            return _FAILED
    return attrs.get(name, _MISSING)


def _instance_dict(obj: object) -> Mapping[str, Any]:
    try:
        attrs = getattr(obj, "__dict__", None)
    except Exception:  # noqa: BLE001 - a __dict__ property that raises
        return _NO_ATTRS
    return attrs if type(attrs) is dict else _NO_ATTRS


@dataclass(frozen=True, slots=True)
class _Plan:
    """The attribute names worth reading on instances of one class, worked out once per class."""

    declared: frozenset[str]  # read with getattr; any other name only from the instance __dict__
    use_dict: bool  # the class declares no fields, so its instances' __dict__ is where attributes live
    text: tuple[str, ...]
    ids: tuple[str, ...]
    scores: tuple[str, ...]
    metas: tuple[str, ...]
    wrappers: tuple[str, ...]
    node: bool
    get_content: bool
    document: bool  # a document attribute is declared (for use_dict classes, look at the instance too)
    kind: str  # _OBJECT, _MAPPING or _TEXT (str and bytes subclasses, numbers: shown as text)
    number: bool  # has __float__ and no __len__: the second half of a (doc, score) pair
    fast: _Fields | None  # plain-field documents: one attrgetter for every role (see _Fields)
    node_score: Callable[[object], Any] | None  # NodeWithScore-like, node and score plain fields: their getter


_PLANS: dict[type, _Plan] = {}  # bounded, so classes made on the fly cannot grow it; dict stores are atomic


def _plan(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is not None:
        return plan
    declared: set[str] = set()
    for source in ("__pydantic_fields__", "__dataclass_fields__", "__attrs_attrs__"):  # pydantic 2, dataclass, attrs
        try:
            fields = getattr(cls, source, None)
            if fields:
                declared.update(f if type(f) is str else str(getattr(f, "name", "")) for f in fields)
                break
        except Exception:  # noqa: BLE001 - an odd class attribute of that name: ignore it
            continue
    use_dict = not declared  # no declared fields: attributes live in each instance's __dict__
    declared_fields = frozenset(declared)
    declared.update(name for names in _ROLES for name in names if _has(cls, name))
    declared.update(name for name in ("node", "get_content") if _has(cls, name))
    text, ids, scores, metas, wrap = (
        names if use_dict else tuple(n for n in names if n in declared) for names in _ROLES
    )
    number = _has(cls, "__float__") and not _has(cls, "__len__")
    try:
        kind = _MAPPING if issubclass(cls, Mapping) else _TEXT if number or issubclass(cls, _TEXT_TYPES) else _OBJECT
    except Exception:  # noqa: BLE001 - an ABC hook that raises: read it as an object
        kind = _OBJECT
    flags = ("node" in declared or use_dict, "get_content" in declared, bool(declared & _DOC_NAMES), kind, number)
    fast = node_score = None
    if kind is _OBJECT and not use_dict and not wrap:
        if not flags[0]:  # not a NodeWithScore
            fast = _fields_reader(cls, (text, ids, scores, metas), declared_fields)
        elif _plain_fields(cls, ("node", "score"), declared_fields):
            node_score = operator.attrgetter("node", "score")
    plan = _Plan(frozenset(declared), use_dict, text, ids, scores, metas, wrap, *flags, fast, node_score)
    if len(_PLANS) < _PLAN_CACHE_MAX:
        _PLANS[cls] = plan
    return plan


def _has(cls: type, name: str) -> bool:
    try:
        return hasattr(cls, name)
    except Exception:  # noqa: BLE001 - a metaclass __getattr__ raising something odd
        return False


def _text(value: object, max_chars: int, cut: list[int]) -> str:
    if type(value) is str:
        if len(value) <= max_chars:
            return value
        cut[0] += 1
        return truncate(value, max_chars)[0]
    text, was_cut = safe_text(value, max_chars)
    if was_cut:
        cut[0] += 1
    return text


def _ident(value: object) -> str | None:
    if value is None:
        return None
    if type(value) is str:
        return (value if len(value) <= _ID_LIMIT else truncate(value, _ID_LIMIT)[0]) or None
    return safe_text(value, _ID_LIMIT)[0] or None


def _meta(value: object) -> Mapping[str, Any] | None:
    if type(value) is dict:
        return value or None
    return value if isinstance(value, Mapping) else None
