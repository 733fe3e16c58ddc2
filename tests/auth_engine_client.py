"""An initiator for the authentication tests: it starts a TransferEngine (with whatever
MC_AUTH_TOKEN its environment has), then tries every kind of call on a target's buffers and
prints one JSON line: each call's return code, the bytes it read, and the error the segment
lookup raised (the message a user sees)."""

import ctypes
import json
import sys

from mooncake._native import MooncakeError
from mooncake.engine import TransferEngine


def main() -> None:
    target, managed, plain, n, local = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    eng = TransferEngine()
    if eng.initialize(local, "P2PHANDSHAKE", "tcp", "") != 0:
        print(json.dumps({"error": "initialize failed"}), flush=True)
        return
    src = ctypes.create_string_buffer(bytes((i * 13 + 5) % 256 for i in range(n)), n)
    dst = ctypes.create_string_buffer(n)
    assert eng.register_memory(ctypes.addressof(src), n) == 0
    assert eng.register_memory(ctypes.addressof(dst), n) == 0
    out = {}
    try:
        eng._segment(target)  # the metadata exchange (P2P handshake: the descriptor call)
        out["open"] = "ok"
    except MooncakeError as e:
        out["open"] = str(e)
    out["first_buffer"] = eng.get_first_buffer_address(target)
    s, d = ctypes.addressof(src), ctypes.addressof(dst)
    half = n // 2
    out["write"] = eng.transfer_sync_write(target, s, plain, n)
    out["batch"] = eng.batch_transfer_sync_write(target, [s, s + half], [managed, managed + half], [half, n - half])
    out["read"] = eng.transfer_sync_read(target, d, plain, n)
    out["read_bytes"] = ctypes.string_at(d, n).hex()
    out["notify"] = eng.send_notify(target, "auth-test", "hello")
    out["probe"] = eng.send_probe(target)
    print(json.dumps(out), flush=True)
    eng.close()


if __name__ == "__main__":
    main()
