"""Top-level alias of :mod:`mooncake.pg` (the module name Mooncake's documentation uses).

``import mooncake_pg`` registers the ``"mooncake-cpu"`` and ``"mooncake"`` torch.distributed
backends and exposes the elastic API.
"""

from mooncake.pg import *  # noqa: F401,F403
from mooncake.pg import __all__  # noqa: F401
