"""``citebot`` command groups, one module each (see ``worker.cli``)."""
