"""``make demo``: the whole citebot stack on loopback, answering two questions on a local forum."""
