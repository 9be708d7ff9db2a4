"""``citebot`` command groups, one module each (see ``worker.app.cli``)."""
