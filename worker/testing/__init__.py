"""Fakes of the external services, shipped with the package like dramatiq's ``StubBroker``.

Real implementations of the protocols in ``worker.protocols`` (state, recorded calls, fault switches),
held to the same contract suites as the real clients (``tests/contracts/``):

- ``models``: ``FakeEmbedder``, ``FakeReranker`` and the TEI ``/embed``, ``/rerank`` and ``/info`` bodies;
- ``chat``: ``FakeChatModel`` and the OpenAI ``chat.completion`` and error bodies;
- ``forum``: ``FakeForum``;
- ``answerer``: ``ClaimingAnswerer`` (claims the row of a delivery as the pipeline does, answers nothing).
"""
