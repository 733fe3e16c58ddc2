"""torch's device-backend autoload hook (entry point group ``torch.backends``, torch >= 2.5).

``import torch`` calls :func:`register` in every environment where this package is installed
(unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), so ``dist.init_process_group(backend="mooncake")``
and ``backend="mooncake-cpu"`` work without ``import mooncake_pg``, as Mooncake's pages write it.

The hook runs on every ``import torch``, so it only registers the two names with small
creators: libmooncake.so, the Go runtime and the c10d shim (``mooncake.pg``) load the first time
torch creates a Mooncake group. Importing ``mooncake.pg`` later keeps these registrations (it
registers only names nobody registered).
"""

from __future__ import annotations

from typing import Any

BACKENDS = (("mooncake-cpu", "cpu"), ("mooncake", "cuda"))


def _lazy_creator(name: str, device: str):
    def create(dist_backend_opts: Any, pg_options: Any):
        from mooncake import pg  # loads libmooncake.so and the shim, once

        return pg._make_creator(device == "cuda")(dist_backend_opts, pg_options)

    create.__name__ = f"create_mooncake_{device}_backend"
    create.__qualname__ = create.__name__
    return create


def register() -> None:
    """Registers the ``"mooncake-cpu"`` and ``"mooncake"`` backends with torch.distributed
    (nothing when torch has no distributed support or the names are taken)."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    plugins = getattr(dist.Backend, "_plugins", {})
    for name, device in BACKENDS:
        if name.upper() in plugins:
            continue
        dist.Backend.register_backend(name, _lazy_creator(name, device), extended_api=True,
                                      devices=[device])
