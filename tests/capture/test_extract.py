"""Retrieved contexts from what retrievers really return, against stand-ins shaped like the real libraries."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cp_observe._capture import _extract
from cp_observe._capture._extract import Context, ExtractedContexts, extract_contexts
from cp_observe._capture._serialize import MARKER_MAX, MAX_JUDGED_CHARS, as_limit

# --- stand-ins for the libraries' document types ---------------------------------------------------------------


class LCDocument(pydantic.BaseModel):
    """``langchain_core.documents.Document``: a pydantic model with ``page_content``, ``metadata`` and ``id``.

    ``similarity_search`` returns a list of these; ``similarity_search_with_score`` and
    ``similarity_search_with_relevance_scores`` return ``(Document, float)`` tuples.
    """

    id: str | None = None
    metadata: dict[str, Any] = pydantic.Field(default_factory=dict)
    page_content: str
    type: str = "Document"


class BaseNode(pydantic.BaseModel):
    """``llama_index.core.schema.BaseNode``: pydantic, id in the ``id_`` field, ``node_id`` a property."""

    id_: str = "node"
    metadata: dict[str, Any] = pydantic.Field(default_factory=dict)
    embedding: list[float] | None = None

    @property
    def node_id(self) -> str:
        return self.id_

    def get_content(self, metadata_mode: Any = None) -> str:
        raise NotImplementedError


class TextNode(BaseNode):
    """``llama_index.core.schema.TextNode``: a ``text`` field; ``get_content()`` returns it (mode NONE)."""

    text: str = ""
    start_char_idx: int | None = None

    def get_content(self, metadata_mode: Any = None) -> str:
        return self.text


class MediaNode(BaseNode):
    """A LlamaIndex node that is not a ``TextNode`` (the newer multimodal ``Node``): only ``get_content()``."""

    body: str = ""

    def get_content(self, metadata_mode: Any = None) -> str:
        return self.body


class NodeWithScore(pydantic.BaseModel):
    """``llama_index.core.schema.NodeWithScore``: fields ``node`` and ``score``, pass-through properties.

    Its ``text`` property raises ``ValueError("Node must be a TextNode to get text.")`` for other nodes.
    """

    node: BaseNode
    score: float | None = None

    @property
    def node_id(self) -> str:
        return self.node.node_id

    @property
    def id_(self) -> str:
        return self.node.id_

    @property
    def text(self) -> str:
        if isinstance(self.node, TextNode):
            return self.node.text
        raise ValueError("Node must be a TextNode to get text.")

    @property
    def metadata(self) -> dict[str, Any]:
        return self.node.metadata

    def get_content(self, metadata_mode: Any = None) -> str:
        return self.node.get_content(metadata_mode)


@dataclasses.dataclass
class LlamaResponse:
    """``llama_index.core.base.response.schema.Response``: ``response``, ``source_nodes``, ``metadata``."""

    response: str | None
    source_nodes: list[NodeWithScore] = dataclasses.field(default_factory=list)
    metadata: dict[str, Any] | None = None

    def __str__(self) -> str:
        return self.response or "None"


@dataclasses.dataclass
class HaystackDocument:
    """``haystack.dataclasses.Document`` (2.x): a dataclass with ``id``, ``content``, ``blob``, ``meta``, ``score``.

    Retrievers return ``{"documents": [Document, ...]}``; ``content`` is ``None`` for blob-only documents.
    """

    id: str = ""
    content: str | None = None
    blob: bytes | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    score: float | None = None
    embedding: list[float] | None = None
    sparse_embedding: Any = None

    def __repr__(self) -> str:
        return f"Document(id={self.id}, blob: {len(self.blob or b'')} bytes)"


class Plain:
    """A user's own result class: attributes set in ``__init__``, nothing declared."""

    def __init__(self, **attributes: Any) -> None:
        self.__dict__.update(attributes)


class Hostile:
    """An object whose ``str``, ``repr`` and public attributes all raise."""

    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")

    __str__ = __repr__

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # let pytest and hypothesis introspect it
            raise AttributeError(name)
        raise RuntimeError(f"{name} exploded")


class ExplodingText:
    """A document-like object whose ``text`` property raises."""

    id = "e1"

    @property
    def text(self) -> str:
        raise RuntimeError("text exploded")


T = "lorem ipsum " * 40


def texts(result: ExtractedContexts) -> list[str]:
    """The texts of the contexts, in order."""
    return [c.text for c in result.contexts]


# --- plain values ---------------------------------------------------------------------------------------------


def test_none_gives_no_context() -> None:
    """None holds no context, and says so with a total of zero."""
    assert extract_contexts(None) == ExtractedContexts((), 0, 0, 0)


def test_empty_list_gives_no_context() -> None:
    """An empty list holds nothing."""
    assert extract_contexts([]) == ExtractedContexts((), 0, 0, 0)


def test_string_is_one_context() -> None:
    """A single string is one context."""
    assert extract_contexts("one") == ExtractedContexts((Context("one"),), 1, 0, 0)


def test_bytes_are_one_decoded_context() -> None:
    """Bytes are decoded as UTF-8 into one context."""
    assert texts(extract_contexts(b"caf\xc3\xa9 \xff")) == ["café \ufffd"]


def test_list_of_strings_keeps_order() -> None:
    """A list of strings gives one context each, in rank order."""
    result = extract_contexts(["a", "b", "c"])
    assert texts(result) == ["a", "b", "c"]
    assert (result.total, result.dropped, result.truncated) == (3, 0, 0)


def test_none_items_are_skipped() -> None:
    """None items in a list are not contexts."""
    result = extract_contexts(["a", None, "b"])
    assert texts(result) == ["a", "b"]
    assert result.total == 2


def test_other_values_become_text() -> None:
    """A number or an unknown object becomes one context of its text."""
    assert texts(extract_contexts(42)) == ["42"]
    assert texts(extract_contexts([1.5, object.__new__(Plain)]))[0] == "1.5"


# --- mappings -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["page_content", "text", "content"])
def test_mapping_text_keys(key: str) -> None:
    """A mapping's text comes from page_content, text or content."""
    assert texts(extract_contexts([{key: "body"}])) == ["body"]


def test_mapping_text_key_precedence() -> None:
    """page_content wins over text, which wins over content."""
    assert texts(
        extract_contexts([{"content": "c", "text": "t", "page_content": "p"}, {"content": "c", "text": "t"}])
    ) == [
        "p",
        "t",
    ]


def test_mapping_document_key_string_and_cohere_shape() -> None:
    """``document`` gives the text when a string, or its text key when a mapping (Cohere rerank)."""
    result = extract_contexts(
        [{"document": "plain"}, {"index": 0, "relevance_score": 0.9, "document": {"text": "reranked"}}]
    )
    assert texts(result) == ["plain", "reranked"]
    assert result.contexts[1].score == 0.9


@pytest.mark.parametrize("key", ["id", "doc_id", "node_id", "_id"])
def test_mapping_id_keys(key: str) -> None:
    """A mapping's id comes from id, doc_id, node_id or _id, as a string."""
    assert extract_contexts([{"text": "t", key: 7}]).contexts[0].id == "7"


@pytest.mark.parametrize("key", ["score", "relevance_score", "similarity", "similarity_score", "_score"])
def test_mapping_score_keys(key: str) -> None:
    """A mapping's score comes from any of the score keys."""
    assert extract_contexts([{"text": "t", key: 0.75}]).contexts[0].score == 0.75


@pytest.mark.parametrize("key", ["metadata", "meta", "payload"])
def test_mapping_metadata_keys(key: str) -> None:
    """A mapping's metadata comes from metadata, meta or payload, not copied."""
    meta = {"source": "a.pdf"}
    assert extract_contexts([{"text": "t", key: meta}]).contexts[0].metadata is meta


def test_distance_is_kept_in_metadata_not_as_score() -> None:
    """A distance is not a score: it lands in the metadata, next to what was there."""
    context = extract_contexts([{"text": "t", "distance": 0.2, "metadata": {"a": 1}}]).contexts[0]
    assert context.score is None
    assert context.metadata == {"a": 1, "distance": 0.2}


def test_nan_and_infinite_scores_are_dropped() -> None:
    """NaN and infinite scores become None; the context stays."""
    result = extract_contexts([{"text": "a", "score": math.nan}, {"text": "b", "score": math.inf}, ("c", math.nan)])
    assert [c.score for c in result.contexts] == [None, None, None]
    assert texts(result) == ["a", "b", "c"]


def test_pinecone_match_text_in_metadata() -> None:
    """A Pinecone query response: matches under ``matches``, text in the metadata."""
    response = {"matches": [{"id": "v1", "score": 0.8, "metadata": {"text": "pine", "src": "x"}}], "namespace": ""}
    context = extract_contexts(response).contexts[0]
    assert (context.text, context.id, context.score) == ("pine", "v1", 0.8)


def test_elasticsearch_hits() -> None:
    """Elasticsearch hits: ``hits.hits``, ``_id``, ``_score`` and the text inside ``_source``."""
    response = {
        "took": 3,
        "hits": {"total": {"value": 1}, "hits": [{"_id": "e", "_score": 2.5, "_source": {"content": "es"}}]},
    }
    context = extract_contexts(response).contexts[0]
    assert (context.text, context.id, context.score) == ("es", "e", 2.5)


@pytest.mark.parametrize(
    "key", ["documents", "contexts", "context", "source_documents", "source_nodes", "nodes", "results"]
)
def test_mapping_wrappers(key: str) -> None:
    """A mapping wrapping a list under a known key gives that list's items."""
    assert texts(extract_contexts({key: ["a", {"text": "b"}]})) == ["a", "b"]


def test_wrapper_wins_over_text_keys() -> None:
    """A mapping with both an answer text and a documents list gives the documents."""
    output = {"text": "the answer", "source_documents": [LCDocument(page_content="evidence")]}
    assert texts(extract_contexts(output)) == ["evidence"]


def test_haystack_pipeline_output() -> None:
    """A Haystack retriever's ``{"documents": [...]}`` output gives its documents."""
    docs = [HaystackDocument(id="h1", content="hay", score=0.4, meta={"f": 1})]
    context = extract_contexts({"documents": docs}).contexts[0]
    assert context == Context("hay", "h1", 0.4, {"f": 1})


def test_haystack_full_pipeline_output() -> None:
    """``Pipeline.run`` output nests each component's outputs under its name: the documents are found."""
    docs = [HaystackDocument(id="h1", content="hay")]
    output = {"llm": {"replies": ["answer"]}, "retriever": {"documents": docs}}
    assert texts(extract_contexts(output)) == ["hay"]


def test_document_metadata_is_not_searched_for_wrappers() -> None:
    """A document whose metadata happens to hold a ``nodes`` list stays one document."""
    assert texts(extract_contexts({"text": "doc", "metadata": {"nodes": ["x"]}})) == ["doc"]


def test_chroma_columns_give_the_documents() -> None:
    """Chroma's column-wise query result gives the texts, flattened across queries."""
    result = {"ids": [["1", "2"]], "documents": [["d1", "d2"]], "distances": [[0.1, 0.2]]}
    assert texts(extract_contexts(result)) == ["d1", "d2"]


def test_mapping_without_text_becomes_json() -> None:
    """A mapping with no text key gives its JSON, and still its id and score."""
    context = extract_contexts([{"id": 1, "score": 0.5, "title": "T"}]).contexts[0]
    assert context.text == '{"id": 1, "score": 0.5, "title": "T"}'
    assert (context.id, context.score) == ("1", 0.5)


# --- library objects ------------------------------------------------------------------------------------------


def test_langchain_documents() -> None:
    """LangChain Documents give page_content, id and metadata."""
    docs = [LCDocument(page_content=T, id="d1", metadata={"source": "a"}), LCDocument(page_content="b")]
    result = extract_contexts(docs)
    assert result.contexts == (Context(T, "d1", None, {"source": "a"}), Context("b"))


def test_langchain_with_scores() -> None:
    """``similarity_search_with_score`` tuples give the document with that score; lists work too."""
    pairs = [(LCDocument(page_content="a"), 0.9), [LCDocument(page_content="b"), 1]]
    result = extract_contexts(pairs)
    assert [(c.text, c.score) for c in result.contexts] == [("a", 0.9), ("b", 1.0)]
    assert result.total == 2


def test_pair_with_numpy_score() -> None:
    """A numpy scalar is a score."""
    import numpy as np
    assert extract_contexts([("a", np.float32(0.5))]).contexts[0].score == 0.5


def test_single_pair_at_top_level() -> None:
    """A lone ``(doc, score)`` tuple is one scored context, not two."""
    assert extract_contexts(("doc", 0.3)).contexts == (Context("doc", None, 0.3),)


def test_llamaindex_nodes_with_score() -> None:
    """NodeWithScore gives its node's text, id and metadata, and its own score."""
    nodes = [NodeWithScore(node=TextNode(id_="n1", text="llama", metadata={"p": 2}), score=0.7)]
    assert extract_contexts(nodes).contexts == (Context("llama", "n1", 0.7, {"p": 2}),)


def test_llamaindex_text_node() -> None:
    """A bare TextNode gives text, id_ and metadata."""
    assert extract_contexts([TextNode(id_="t1", text="tn")]).contexts == (Context("tn", "t1"),)


def test_llamaindex_non_text_node_uses_get_content() -> None:
    """A node that is not a TextNode is read through get_content(), never through the raising ``text``."""
    context = extract_contexts([NodeWithScore(node=MediaNode(id_="m1", body="media"), score=0.1)]).contexts[0]
    assert context == Context("media", "m1", 0.1)


def test_llamaindex_response_source_nodes() -> None:
    """A Response gives its source nodes, not its answer."""
    response = LlamaResponse("answer", [NodeWithScore(node=TextNode(text="src"), score=0.2)], {"k": 1})
    assert texts(extract_contexts(response)) == ["src"]


def test_haystack_document() -> None:
    """A Haystack Document gives content, id, score and meta."""
    assert extract_contexts([HaystackDocument(id="h", content="c", score=0.3, meta={"m": 1})]).contexts == (
        Context("c", "h", 0.3, {"m": 1}),
    )


def test_haystack_blob_document_uses_its_repr() -> None:
    """A Haystack Document without content is shown by its repr, keeping its id."""
    context = extract_contexts([HaystackDocument(id="b", blob=b"12345")]).contexts[0]
    assert context.text == "Document(id=b, blob: 5 bytes)"
    assert context.id == "b"


@pytest.mark.parametrize("name", ["page_content", "text", "content"])
def test_generic_objects(name: str) -> None:
    """Any object with page_content, text or content is a document, with id, score and metadata."""
    obj = Plain(**{name: "generic", "id": 5, "score": 0.5, "metadata": {"a": 1}})
    assert extract_contexts([obj]).contexts == (Context("generic", "5", 0.5, {"a": 1}),)


def test_object_wrapping_documents() -> None:
    """A user's result object holding ``documents`` gives those."""
    assert texts(extract_contexts(Plain(query="q", documents=["x", "y"]))) == ["x", "y"]


def test_plain_object_with_text_in_metadata() -> None:
    """An object with only metadata (a Qdrant-like point) takes its text from there."""
    point = Plain(id=3, score=0.6, payload={"page_content": "qd", "src": "s"})
    assert extract_contexts([point]).contexts[0].text == "qd"


def test_message_like_text_method_is_not_text() -> None:
    """A ``text`` method (as on LangChain 0.3 messages) is skipped in favour of ``content``."""

    class Message:
        content = "real"

        def text(self) -> str:
            return "method"

    assert texts(extract_contexts([Message()])) == ["real"]


def test_dict_values_and_sets() -> None:
    """A dict's values and other collections are iterated like lists."""
    assert texts(extract_contexts({"a": "x", "b": "y"}.values())) == ["x", "y"]
    assert texts(extract_contexts(frozenset({"only"}))) == ["only"]


# --- nesting, bounds and counting ------------------------------------------------------------------------------


def test_nested_lists_flatten_once() -> None:
    """A batch of per-query lists is flattened one level; deeper lists become JSON text."""
    result = extract_contexts([["a", "b"], ["c"], [["d"]]])
    assert texts(result) == ["a", "b", "c", '["d"]']
    assert result.total == 4


def test_ten_thousand_items_are_bounded_and_counted() -> None:
    """Ten thousand items give max_items contexts; the rest are counted as dropped."""
    result = extract_contexts([f"doc {i}" for i in range(10_000)], max_items=100)
    assert len(result.contexts) == 100
    assert (result.total, result.dropped) == (10_000, 9_900)
    assert result.contexts[-1].text == "doc 99"


def test_dropped_counts_inside_nested_lists() -> None:
    """Items of a nested list beyond the bound are counted exactly."""
    result = extract_contexts([["a", "b", "c"], ["d", "e"]], max_items=2)
    assert texts(result) == ["a", "b"]
    assert (result.total, result.dropped) == (5, 3)


def test_max_items_zero() -> None:
    """max_items=0 returns nothing and counts everything as dropped."""
    assert extract_contexts(["a", "b"], max_items=0) == ExtractedContexts((), 2, 2, 0)
    assert extract_contexts("a", max_items=0) == ExtractedContexts((), 1, 1, 0)


def test_ten_megabyte_string_is_truncated_and_counted() -> None:
    """A 10 MB context is cut to max_chars plus the marker, and counted as truncated."""
    result = extract_contexts(["x" * 10_000_000, "short"], max_chars=1_000)
    assert len(result.contexts[0].text) <= 1_000 + MARKER_MAX
    assert result.contexts[0].text.endswith("[truncated 9999000 chars]")
    assert result.truncated == 1


def test_truncation_applies_to_every_shape() -> None:
    """Texts from dicts, objects and bytes are cut and counted alike."""
    long = "y" * 50
    items = [{"text": long}, LCDocument(page_content=long), long.encode(), HaystackDocument(content=long)]
    result = extract_contexts(items, max_chars=10)
    assert result.truncated == 4
    assert all(len(c.text) <= 10 + MARKER_MAX for c in result.contexts)


def test_long_ids_are_cut() -> None:
    """An id longer than 256 characters is cut."""
    assert len(extract_contexts([{"text": "t", "id": "i" * 1000}]).contexts[0].id or "") <= 256 + MARKER_MAX


@pytest.mark.parametrize(
    ("max_items", "max_chars", "bounds", "expected"),
    [
        (None, None, (100, 20_000), ExtractedContexts((Context("abc"),) * 3, 3, 0, 0)),
        ("5", 1.5, (100, 20_000), ExtractedContexts((Context("abc"),) * 3, 3, 0, 0)),
        (-1, -1, (0, 0), ExtractedContexts((), 3, 3, 0)),
    ],
)
def test_bad_bounds_do_not_raise(
    max_items: Any, max_chars: Any, bounds: tuple[int, int], expected: ExtractedContexts
) -> None:
    """Nonsense bounds fall back to sane ones instead of raising, and the fallback is what extraction uses."""
    assert (as_limit(max_items, 100), as_limit(max_chars, MAX_JUDGED_CHARS)) == bounds
    # extract_contexts swallows errors into an empty result, so only the exact contexts prove bounding worked.
    assert extract_contexts(["abc"] * 3, max_items=max_items, max_chars=max_chars) == expected


# --- generators -------------------------------------------------------------------------------------------------


def test_generator_is_never_read() -> None:
    """A generator is the host's own: it is not iterated at all, and the result says nothing was captured."""
    pulled: list[int] = []

    def gen() -> Iterator[str]:
        for i in range(1_000):
            pulled.append(i)
            yield str(i)

    it = gen()
    result = extract_contexts(it, max_items=3)
    assert result is _extract.NOT_CAPTURED
    assert (result.contexts, result.total) == ((), None)
    assert pulled == []
    assert next(it) == "0"


def test_iterator_is_left_whole_for_its_owner() -> None:
    """An iterator passed in is not consumed: its owner still reads every item."""
    it = iter(["a", "b", "c", "d"])
    assert extract_contexts(it, max_items=1) is _extract.NOT_CAPTURED
    assert list(it) == ["a", "b", "c", "d"]


@pytest.mark.parametrize("holder", ["mapping", "attribute"])
def test_iterator_under_a_wrapper_name_is_not_read(holder: str) -> None:
    """An iterator reached through a wrapper key or attribute (``documents``) is not read either."""
    it = iter(["a", "b"])
    value: Any = {"documents": it} if holder == "mapping" else Plain(documents=it)
    assert extract_contexts(value) is _extract.NOT_CAPTURED
    assert list(it) == ["a", "b"]


def test_endless_generator_terminates() -> None:
    """An endless generator is not read, so extraction returns at once."""

    def gen() -> Iterator[None]:
        while True:
            yield None

    assert extract_contexts(gen(), max_items=5) == ExtractedContexts((), None, 0, 0)


def test_node_with_score_reads_score_once() -> None:
    """Shape detection reads a NodeWithScore-like object's ``score`` property exactly once."""
    reads: list[str] = []

    class Scored:
        node = None

        @property
        def score(self) -> float:
            reads.append("score")
            return 0.5

        @property
        def text(self) -> str:
            return "body"

    [context] = extract_contexts([Scored()]).contexts
    assert (context.text, context.score) == ("body", 0.5)
    assert reads == ["score"]


# --- hostile input ----------------------------------------------------------------------------------------------


def test_hostile_item_becomes_placeholder_and_others_survive() -> None:
    """An item that raises everywhere becomes a placeholder; its neighbours are unaffected."""
    result = extract_contexts(["before", Hostile(), "after"])
    assert texts(result) == ["before", "<unrepresentable Hostile>", "after"]


def test_raising_text_property_keeps_the_id() -> None:
    """A document whose text property raises becomes a placeholder that keeps its id."""
    assert extract_contexts([ExplodingText()]).contexts == (Context("<unrepresentable ExplodingText>", "e1"),)


def test_raising_repr_inside_a_mapping() -> None:
    """A mapping without text whose values cannot be shown still gives JSON text."""
    assert extract_contexts([{"x": Hostile()}]).contexts[0].text == '{"x": "<unrepresentable Hostile>"}'


def test_hostile_top_level_value() -> None:
    """A hostile value passed as the whole result gives a placeholder, not an exception."""
    assert texts(extract_contexts(Hostile())) == ["<unrepresentable Hostile>"]


def test_recursive_list_and_dict() -> None:
    """Self-referencing containers terminate."""
    items: list[Any] = ["a"]
    items.append(items)
    mapping: dict[str, Any] = {"k": 1}
    mapping["self"] = mapping
    result = extract_contexts([items, mapping])
    assert texts(result)[0] == "a"
    assert "<recursive>" in texts(result)[1]
    assert "<recursive>" in texts(result)[2]


def test_recursive_wrapper_terminates() -> None:
    """A mapping whose wrapper key points at itself terminates."""
    mapping: dict[str, Any] = {}
    mapping["documents"] = mapping
    assert len(extract_contexts(mapping).contexts) == 1


def test_iterable_with_raising_iter() -> None:
    """A collection whose iteration raises gives no contexts and an unknown total."""

    class Broken(list[str]):
        def __iter__(self) -> Iterator[str]:
            raise RuntimeError("no")

    assert extract_contexts(Broken(["a"])).total is None


def test_plan_cache_is_bounded() -> None:
    """Classes made on the fly do not grow the per-class cache without bound."""
    for i in range(_extract._PLAN_CACHE_MAX + 50):
        extract_contexts([type(f"C{i}", (), {"text": "t"})()])
    assert len(_extract._PLANS) <= _extract._PLAN_CACHE_MAX


def test_fast_construction_equals_the_constructor() -> None:
    """Contexts built through tuple.__new__ equal, hash and freeze like constructed ones."""
    built = _extract._make("t", "i", 0.5, None)
    assert built == Context("t", "i", 0.5, None)
    assert type(built) is Context
    assert hash(built) == hash(Context("t", "i", 0.5, None))
    with pytest.raises(AttributeError):
        built.text = "changed"  # type: ignore[misc]
    result = _extract._result((built,), 3, 2, 1)
    assert result == ExtractedContexts((built,), 3, 2, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.total = 0  # type: ignore[misc]


# --- properties -------------------------------------------------------------------------------------------------

json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50) | st.binary(max_size=20),
    lambda children: (
        st.lists(children, max_size=6)
        | st.tuples(children, st.floats())
        | st.dictionaries(
            st.sampled_from(
                ["text", "page_content", "content", "id", "score", "metadata", "documents", "distance", "x"]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=25,
)
odd = (
    st.builds(Hostile)
    | st.builds(ExplodingText)
    | st.builds(LCDocument, page_content=st.text(max_size=30), id=st.none() | st.text(max_size=5))
    | st.builds(HaystackDocument, content=st.none() | st.text(max_size=30), score=st.none() | st.floats())
    | st.builds(lambda text, score: NodeWithScore(node=TextNode(text=text), score=score), st.text(), st.floats())
)
anything = st.recursive(json_like | odd, lambda children: st.lists(children, max_size=6), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(value=anything, max_items=st.integers(min_value=0, max_value=8), max_chars=st.integers(0, 40))
def test_never_raises_and_is_bounded(value: object, max_items: int, max_chars: int) -> None:
    """Any value gives at most max_items contexts, bounded texts and ids, finite scores, consistent counts."""
    result = extract_contexts(value, max_items=max_items, max_chars=max_chars)
    assert len(result.contexts) <= max_items
    for context in result.contexts:
        assert type(context.text) is str
        assert len(context.text) <= max_chars + MARKER_MAX
        assert context.id is None or len(context.id) <= 256 + MARKER_MAX
        assert context.score is None or math.isfinite(context.score)
    assert result.total is None or result.total == len(result.contexts) + result.dropped
    assert 0 <= result.truncated <= len(result.contexts)


@settings(max_examples=100, deadline=None)
@given(value=st.lists(json_like | odd, max_size=30), max_items=st.integers(0, 10))
def test_iterators_are_never_consumed(value: list[Any], max_items: int) -> None:
    """Whatever an iterator yields, extraction leaves every item for the caller."""
    it = iter(value)
    assert extract_contexts(it, max_items=max_items) is _extract.NOT_CAPTURED
    assert list(it) == value


class _Unrenderable(BaseNode):
    """A node whose only way to its text, ``get_content()``, raises (as LlamaIndex does for some media)."""

    def get_content(self, metadata_mode: Any = None) -> str:
        raise ValueError("cannot render this node")


class _NoStr:
    """A host object whose ``__str__`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def test_host_object_failures_are_counted_as_host_errors_not_ours(production_errors: None) -> None:
    """A raising get_content() or __str__ gives a placeholder and a counted host error, never an internal one."""
    from cp_observe import _internal

    _internal.reset_error_counts()
    [unrenderable] = extract_contexts([_Unrenderable(id_="u1")]).contexts
    assert unrenderable.text.startswith("<unrepresentable")
    [no_str] = extract_contexts([_NoStr()]).contexts
    assert "_NoStr" in no_str.text  # rendered through repr() instead
    counts = _internal.error_counts()
    assert counts.get("host:get_content()") == 1, counts
    assert counts.get("host:__str__()") == 1, counts
    assert not [key for key in counts if key.startswith("internal:")], counts


# --- the fast readers give the general reader's answer -----------------------------------------------------------

_ROLE_NAMES = ("page_content", "text", "content", "metadata", "meta", "payload", "score", "relevance_score",
               "similarity", "similarity_score", "_score", "distance", "id", "doc_id", "node_id", "_id", "document",
               "other")
_field_values = st.one_of(
    st.none(), st.text(max_size=30), st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.just(""), st.text(min_size=300, max_size=300),
    st.just(len), st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(_ROLE_NAMES), _field_values, max_size=7))
def test_dict_fast_reader_agrees_with_the_general_reader(doc: dict[str, Any]) -> None:
    """A dict read by its key set's plan gives exactly what the general mapping reader gives, or defers to it."""
    fast = _extract._from_dict(doc, 100, [0])
    general = _extract._from_mapping(doc, 100, [0], None)
    if fast is not None:
        assert fast == general


def test_dict_fast_reader_is_used_for_a_langchain_style_dict() -> None:
    """The common dict shape is served by the fast reader (not deferred), with the general reader's answer."""
    doc = {"page_content": "alpha", "metadata": {"source": "a.md"}, "id": "d1", "score": 0.5}
    fast = _extract._from_dict(doc, 100, [0])
    assert fast is not None
    assert fast == _extract._from_mapping(doc, 100, [0], None) == Context("alpha", "d1", 0.5, {"source": "a.md"})


def _document_class(fields: tuple[str, ...], slots: bool) -> type:
    return dataclasses.make_dataclass("Doc", [(name, Any, dataclasses.field(default=None)) for name in fields],
                                      slots=slots)


_FIELD_SETS = [
    ("content", "id", "score", "meta"),
    ("page_content", "metadata", "id"),
    ("text", "id_", "node_id", "metadata"),
    ("text", "content", "score", "similarity", "meta", "payload"),
    ("content", "doc_id", "relevance_score"),
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_FIELD_SETS), st.booleans(), st.data())
def test_field_fast_reader_agrees_with_the_general_reader(fields: tuple[str, ...], slots: bool, data: Any) -> None:
    """A plain-field document read by one attrgetter gives exactly what the name-by-name reader gives, or defers."""
    cls = _document_class(fields, slots)
    doc = cls(**{name: data.draw(_field_values, label=name) for name in fields})
    plan = _extract._plan(cls)
    assert plan.fast is not None
    fast = _extract._from_fields(doc, plan.fast, 100, [0], None)
    general = _extract._from_object(doc, dataclasses.replace(plan, fast=None), 100, [0], score=None, nested=False)
    if fast is not None:
        assert fast == general


def test_field_fast_reader_skips_properties_and_custom_getattribute() -> None:
    """Only plain fields are read at once: a class with a property first, or its own __getattribute__, is not."""

    @dataclasses.dataclass
    class WithProperty:
        body: str = ""

        @property
        def text(self) -> str:
            return self.body

    class Watched:
        __dataclass_fields__ = {"text": None}  # noqa: RUF012 - imitates a declared field

        def __init__(self) -> None:
            self.text = "t"

        def __getattribute__(self, name: str) -> Any:
            return object.__getattribute__(self, name)

    assert _extract._plan(WithProperty).fast is None
    assert _extract._plan(Watched).fast is None
    assert extract_contexts([WithProperty("b")]).contexts[0].text == "b"


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(_FIELD_SETS), _field_values, st.data())
def test_node_with_score_fast_reader_agrees_with_the_general_reader(
    fields: tuple[str, ...], own: object, data: Any
) -> None:
    """A NodeWithScore of plain fields read by its fast path gives the general reader's answer, or defers."""
    node_cls = _document_class(fields, slots=False)
    pair_cls = dataclasses.make_dataclass("NodeWithScore", [("node", Any), ("score", Any)])
    node = node_cls(**{name: data.draw(_field_values, label=name) for name in fields})
    _extract._plan(node_cls)  # the node's class is planned when first met by the general reader
    plan = _extract._plan(pair_cls)
    assert plan.node_score is not None
    fast = _extract._from_node(pair_cls(node, own), plan.node_score, 100, [0])
    if fast is not None:
        assert fast == _extract._context(pair_cls(node, own), 100, [0])


def test_field_fast_reader_answers_for_a_plain_document_class() -> None:
    """A Haystack-shaped dataclass is read by the fast path itself (not deferred), with the general answer."""
    cls = _document_class(("content", "id", "score", "meta"), slots=True)
    doc = cls(content="alpha", id="h1", score=0.4, meta={"f": 1})
    plan = _extract._plan(cls)
    assert plan.fast is not None
    fast = _extract._from_fields(doc, plan.fast, 100, [0], None)
    assert fast == Context("alpha", "h1", 0.4, {"f": 1})
    assert fast == _extract._from_object(doc, dataclasses.replace(plan, fast=None), 100, [0], score=None, nested=False)
