"""The cp-observe demo: a small offline RAG app (BM25 retrieval, extractive answers) scored live."""
