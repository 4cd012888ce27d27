#!/usr/bin/env python3
"""kv-cache.py: one client of the KV-cache storage benchmark (see kvcache_sim/cli.py, or --help)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kvcache_sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
