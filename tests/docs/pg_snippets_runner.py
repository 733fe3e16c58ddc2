"""Runs several process-group snippets of a page, one after the other, in one torchrun job
(one launch instead of one per snippet keeps the docs suite short).

Usage (under torchrun): pg_snippets_runner.py SNIPPETS.json OUTDIR. SNIPPETS.json is a list of
[name, code]. Each snippet runs as a script of its own (a fresh globals dict, __name__ ==
"__main__"); what it prints goes to OUTDIR/rank<RANK>.txt between "=== BEGIN name" and
"=== END name" lines, with "=== OK name" or "=== ERROR name: Type: message" (an exception of
the snippet: the runner then destroys the snippet's process group and goes on). Whether
mooncake.pg was imported before the snippet ran is written too ("=== LOADED name True").
"""

import json
import os
import socket
import sys
import time
from datetime import timedelta

import torch.distributed as dist

snippets = json.load(open(sys.argv[1]))
rank = int(os.environ["RANK"])
out = open(os.path.join(sys.argv[2], f"rank{rank}.txt"), "w", buffering=1)
sys.stdout = out
# Each snippet's group gets a rendezvous store of its own, hosted by rank 0's runner (as
# torchrun's agent hosts one: it outlives the group, which may be destroyed by one rank while
# the other still uses it): the default group has the same name every time, and keys a
# previous snippet's group left in one shared store would mislead the next one.
world = int(os.environ["WORLD_SIZE"])
agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                      timeout=timedelta(seconds=120))
os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"


def barrier(key):
    agent.add(key, 1)
    while int(agent.add(key, 0)) < world:
        time.sleep(0.01)


for i, (name, code) in enumerate(snippets):
    server = None
    if rank == 0:
        server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                               timeout=timedelta(seconds=120))
        agent.set(f"docs_snippet_port/{i}", str(server.port))
    os.environ["MASTER_PORT"] = agent.get(f"docs_snippet_port/{i}").decode()
    print(f"=== BEGIN {name}")
    print(f"=== LOADED {name} {'mooncake.pg' in sys.modules}")
    try:
        exec(compile(code, name, "exec"), {"__name__": "__main__"})
        print(f"=== OK {name}")
    except Exception as e:  # the snippet's error is its result
        print(f"=== ERROR {name}: {type(e).__name__}: {e}")
    barrier(f"docs_snippet_done/{i}")
    if dist.is_initialized():  # snippets that stop early (or never destroy) leave a group
        dist.destroy_process_group()
    barrier(f"docs_snippet_closed/{i}")
    del server
    print(f"=== END {name}")
out.close()
