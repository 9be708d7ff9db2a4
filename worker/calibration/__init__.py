"""``citebot calibrate``: the second stage's weights and zone thresholds fitted to the forum it serves.

``questions`` builds questions from the forum's solved topics (and the shipped out-of-domain ones),
``fit`` fits (the one implementation ``python -m eval fit-stage`` also runs), ``run`` collects the
features through the retriever, fits on one half and judges on the other, ``store`` keeps the result in
the database, where the worker reads it (``docs/calibrate.md``).
"""
