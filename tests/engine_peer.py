"""A target process for the engine tests: it starts a TransferEngine, offers two buffers (an
engine-managed shared one and plain registered memory), prints where they are, then answers
commands on stdin: "dump KIND OFF LEN" (hex of its memory), "notifies", "quit"."""

import ctypes
import json
import sys

from mooncake.engine import TransferEngine


def main() -> None:
    meta, name, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    eng = TransferEngine()
    if eng.initialize(name, meta, "tcp", "") != 0:
        print(json.dumps({"error": "initialize failed"}), flush=True)
        return
    managed = eng.allocate_managed_buffer(size)
    plain = ctypes.create_string_buffer(size)
    pattern = bytes(i % 251 for i in range(size))
    eng.write_bytes_to_buffer(managed, pattern, size)
    ctypes.memmove(plain, pattern, size)
    assert eng.register_memory(ctypes.addressof(plain), size) == 0
    bufs = {"managed": managed, "plain": ctypes.addressof(plain)}
    print(json.dumps({"name": eng.get_segment_name(), **bufs}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "dump":
            data = eng.read_bytes_from_buffer(bufs[cmd[1]] + int(cmd[2]), int(cmd[3]))
            print(data.hex(), flush=True)
        elif cmd[0] == "notifies":
            print(json.dumps(eng.get_notifies()), flush=True)


if __name__ == "__main__":
    main()
