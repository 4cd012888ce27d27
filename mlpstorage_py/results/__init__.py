"""The results tree: sentinel, leaves, metadata, provenance, code images and probes."""
