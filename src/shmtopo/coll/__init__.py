"""The collectives of a Comm: node-local calls, the across-nodes half,
levels, argument normalisers, the public functions, persistent requests."""
