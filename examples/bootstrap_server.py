#!/usr/bin/env python3
"""The HTTP metadata server of Mooncake's RL and Rust pages (upstream's
mooncake-transfer-engine/example/http-metadata-server-python/bootstrap_server.py).

    python examples/bootstrap_server.py &          # serves http://0.0.0.0:8080/metadata

Engines and store clients then use "http://localhost:8080/metadata" as their metadata server.
It is mooncake.http_metadata_server.KVBootstrapServer, which needs only the standard library
(no aiohttp) and answers exactly like the Go server (mooncake_http_metadata_server, or
mooncake_master --enable_http_metadata_server): start one of them, not both on one port.
"""

from __future__ import annotations

import os
import sys

try:
    from mooncake.http_metadata_server import main
except ImportError:  # run from a source checkout without the package installed
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "python"))
    from mooncake.http_metadata_server import main

if __name__ == "__main__":
    sys.exit(main())
