package pg

// Handing an op's result over: when a rank dies or is cut off at the end of an op between
// hosts, the survivors can split on that op (#k): those that received its last message
// completed #k with every contribution (some returned it already), the others could not (its
// message to them was lost) and the group agrees that it failed and runs it again over the
// survivors. A member that returned #k cannot run it again, so the rerun would meet its next
// op. Instead the members that completed #k hand its result to those that could not:
//
//   - Each rank keeps a copy of the result of its last all_reduce between hosts (up to
//     handoverMax bytes; Group.done).
//   - A rank that applies a fault decision publishes that copy in the rendezvous store under
//     "<group>/mooncake/res/<k>" when #k is the op the decision is about (FailedSeq) or the one
//     before it (a decision made by members that failed #k+1: they completed #k).
//   - A rank whose op #k failed takes the published result (same op number, same length)
//     instead of running #k again when the group is past #k: the fault decision was made by
//     members that failed a later op (FailedSeq > k), or its rerun of #k met members that do
//     not run it (a mismatch or an abort with nobody dead and no new decision). The op then
//     completes with the survivors' hint, as a rerun does; its next op lines up with the
//     others' (apply moves the op number past the aborted one).
//
// The result it takes is one the group computed: the completing member needed every member's
// contribution to #k, this rank's included. When nobody published (a larger op, or an op other
// than all_reduce) the op fails on this rank with an error, as before: never a wrong value.

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/worker"
)

// handoverMax bounds the result a rank keeps for a hand-over (the bound of the input copy
// runFT keeps for a rerun).
const handoverMax = 1 << 20

// doneOp is the result of the last all_reduce this rank completed between hosts.
type doneOp struct {
	seq  uint64
	ok   bool
	data []byte
}

// keepDone copies the result of op #seq (op names the collective) when it may have to be
// handed over: an all_reduce between hosts of at most handoverMax bytes.
func (pg *Group) keepDone(op string, seq uint64, result []byte) {
	if pg.stall == nil || op != "all_reduce" || len(result) == 0 || len(result) > handoverMax {
		pg.done.ok = false
		return
	}
	if cap(pg.done.data) < len(result) {
		pg.done.data = make([]byte, len(result))
	}
	pg.done.data = pg.done.data[:len(result)]
	copy(pg.done.data, result)
	pg.done.seq, pg.done.ok = seq, true
}

// publishDone publishes the kept result when fault decision d is about the op it belongs to
// or the next one (see the file comment). Called by apply.
func (pg *Group) publishDone(d *decision) {
	if d.Kind != "fault" || !pg.done.ok || (d.FailedSeq != pg.done.seq && d.FailedSeq != pg.done.seq+1) {
		return
	}
	v := binary.LittleEndian.AppendUint64(make([]byte, 0, 16+len(pg.done.data)), pg.done.seq)
	v = binary.LittleEndian.AppendUint64(v, uint64(len(pg.done.data)))
	v = append(v, pg.done.data...)
	if err := pg.st.Set(pg.key("res", pg.done.seq), v); err != nil {
		pg.logf("publishing the result of op #%d for members that could not complete it: %v", pg.done.seq, err)
	}
}

// takeOver fills inplace with the result of op #seq published by a member that completed it
// and returns the op's outcome (the survivors' hint), or cause wrapped in an error saying why
// the op fails here when no such result comes within the probe timeout.
func (pg *Group) takeOver(op string, seq uint64, inplace []byte, failed []int, cause error) error {
	fail := func(why string) error {
		return opErr{fmt.Errorf("%s (op #%d) on rank %d: the op failed here and the group agreed on the failed ranks %v, but other members completed it before that (they run their next op now), so it cannot run again over the survivors, and %s: the op fails here, and the next op runs with them: %w",
			op, seq, pg.cfg.Rank, failed, why, cause)}
	}
	if op != "all_reduce" || len(inplace) == 0 || len(inplace) > handoverMax {
		return fail("its result is not handed over (an all_reduce of at most 1 MiB only)")
	}
	wait := pg.probeTimeout() + time.Second
	v, err := pg.st.Get(pg.key("res", seq), wait)
	if err != nil {
		return fail(fmt.Sprintf("no member published its result within %s (%v)", wait, err))
	}
	if len(v) < 16 || binary.LittleEndian.Uint64(v) != seq || binary.LittleEndian.Uint64(v[8:]) != uint64(len(inplace)) || len(v)-16 != len(inplace) {
		return fail(fmt.Sprintf("the published result does not fit it (%d bytes for a %d-byte op)", len(v), len(inplace)))
	}
	copy(inplace, v[16:])
	pg.logf("%s (op #%d) failed here, and members that completed it before the group agreed on ranks %v handed its result over", op, seq, failed)
	pg.keepDone(op, seq, inplace)
	return &worker.Degraded{Failed: failed}
}
