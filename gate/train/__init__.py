"""The fits of the gate's learned layers, run by ``make gate`` (``python -m gate.build``).

- :mod:`gate.train.data`: the labelled lines both heads learn from, and the forum text;
- :mod:`gate.train.lexical`: the lexical head (``gate/lexical.json``);
- :mod:`gate.train.head`: the logistic regression of the embedding layer's linear head;
- :mod:`gate.train.intent`: the embedding layer (``gate/intent/<model>.json``).

Training needs numpy and scipy and, for the embedding layer, the local embedder; the gate at run
time needs none of this package.
"""
