// Package pg is the process-group runtime behind torch's "mooncake-cpu" and "mooncake"
// backends: a group of ranks that run collectives and point-to-point ops over a p2p endpoint,
// with elastic membership.
//
// It owns:
//   - group creation over a rendezvous Store (the c10d store torchrun gives every rank): each
//     rank publishes its endpoint, connects to the others and, on one host, sets up the
//     same-host fast path (group.go);
//   - the ordered op queue every collective runs on, and point-to-point ops outside it
//     (group.go, ops.go);
//   - membership: the decision log in the rendezvous store that every rank applies in order
//     (membership.go), the fault-tolerant op runner that completes an op over the survivors
//     when a peer dies (ftrun.go), fencing and the majority rule: a rank the group went on
//     without fails its ops until it rejoins, and a minority never decides (fence.go), and the
//     program calls deactivate_ranks, recover_ranks, extend_group_size_to, join_group,
//     sync_after_failure (calls.go);
//   - authentication of the group's connections, on by default: rank 0's token shared through
//     the rendezvous Store, or the engine's MC_AUTH_TOKEN (auth.go, docs/security.md);
//   - the group's configuration (config.go) and its error codes (errors.go).
//
// It does not read the environment: the caller (the C ABI in capi/) reads the knobs at
// init_process_group and passes them in Config.Options. It knows nothing of C: capi converts
// pointers to slices and keeps the handle tables.
//
// The protocol is tested in this package with every rank in one process, each with its own
// transfer engine (membership_test.go, elastic_test.go); tests/test_elastic.py runs the same
// scenarios with real processes under torch.
package pg
