"""Stages 1–3 of the pipeline: recall, keyword search, fusion, rerank, aggregation and evidence zones.

The entry point is :class:`worker.retrieval.retriever.Retriever`; every other module is one stage.
"""
