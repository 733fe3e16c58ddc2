package ha

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// Entry is one oplog entry. Type and Payload are the master's; this package only stores
// them.
type Entry struct {
	// Seq is the entry's sequence id: 1, 2, 3, ... with no gaps (a log may start above 1,
	// e.g. after a snapshot restore into an empty store).
	Seq uint64
	// Type is the master's operation type (PUT_END, REMOVE, ...).
	Type uint32
	// Payload is the encoded operation.
	Payload []byte
	// CRC is the crc32c of Seq, Type and Payload. Append fills it in; reads verify it.
	CRC uint32
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum computes the entry's crc32c (over seq, type and payload).
func (e Entry) Checksum() uint32 {
	var hdr [12]byte
	binary.BigEndian.PutUint64(hdr[0:], e.Seq)
	binary.BigEndian.PutUint32(hdr[8:], e.Type)
	c := crc32.Update(0, castagnoli, hdr[:])
	return crc32.Update(c, castagnoli, e.Payload)
}

// Oplog errors, to test with errors.Is.
var (
	// ErrFenced: the fence given to Append no longer matches the leader key; this master
	// is not (or no longer) the leader and must stop serving.
	ErrFenced = errors.New("oplog append refused: this master no longer holds the leader key")
	// ErrSeqMismatch: the entries do not continue the log (wrong first sequence id, or a
	// gap inside the batch).
	ErrSeqMismatch = errors.New("oplog entries do not continue the log")
	// ErrCompacted: the entries asked for were truncated; load a snapshot first.
	ErrCompacted = errors.New("oplog entries were truncated")
	// ErrCorrupt: a stored entry fails its checksum or cannot be decoded.
	ErrCorrupt = errors.New("oplog entry is corrupt")
)

// OpLog is the replicated operation log a leader appends to and a hot standby replays.
// Implementations are safe for concurrent use, but appends should come from one writer
// (the leader) since each must continue the log.
type OpLog interface {
	// Append stores entries durably and returns only after the store has made them so
	// (etcd: committed by a quorum; Redis: accepted by the server, see docs/ha.md). The
	// entries' Seq must be consecutive and continue LastSeq (any first Seq is accepted on
	// an empty store). fence is the leader's View: the append is refused with ErrFenced
	// unless the leader key still holds it (the zero View skips the check; for tests and
	// single-master setups). On etcd a large batch is split into several transactions;
	// if Append fails, a prefix of the entries may be stored: read LastSeq before retrying.
	Append(ctx context.Context, fence View, entries []Entry) error
	// ReadFrom returns up to limit entries starting at seq (fewer at the end of the log;
	// none when seq is past it). limit <= 0 means 1024. Entries before seq that were
	// truncated give ErrCompacted.
	ReadFrom(ctx context.Context, seq uint64, limit int) ([]Entry, error)
	// LastSeq is the sequence id of the last appended entry (0 for an empty store). It
	// survives Truncate.
	LastSeq(ctx context.Context) (uint64, error)
	// Tail calls fn with every entry from seq on, in order, in batches, waiting for new
	// ones as they are appended (etcd: watch; Redis: blocking stream read), until ctx
	// ends or fn returns an error (which Tail then returns).
	Tail(ctx context.Context, seq uint64, fn func([]Entry) error) error
	// Truncate drops entries before seq (those a saved snapshot covers). Entries before
	// seq that share a stored batch with seq may stay.
	Truncate(ctx context.Context, seq uint64) error
}

// OpLogConfig configures an OpLog.
type OpLogConfig struct {
	// ClusterID is the master's --cluster_id. Required.
	ClusterID string
	// MaxBatchBytes bounds one etcd transaction's payload (default 1 MiB; etcd refuses
	// requests over --max-request-bytes, 1.5 MiB by default).
	MaxBatchBytes int
	// RedisWaitReplicas, when > 0, makes Append wait (Redis WAIT) until that many Redis
	// replicas acknowledged the entries, failing after RedisWaitTimeout (default 1 s).
	RedisWaitReplicas int
	RedisWaitTimeout  time.Duration
}

// DefaultMaxBatchBytes is OpLogConfig.MaxBatchBytes's default.
const DefaultMaxBatchBytes = 1 << 20

// defaultReadLimit is ReadFrom's limit when none is given.
const defaultReadLimit = 1024

// readBounds gives ReadFrom's arguments their defaults: seq 0 reads from the first entry,
// limit <= 0 reads up to defaultReadLimit entries.
func readBounds(seq uint64, limit int) (uint64, int) {
	if seq == 0 {
		seq = 1
	}
	if limit <= 0 {
		limit = defaultReadLimit
	}
	return seq, limit
}

// NewOpLog makes the oplog of cfg.ClusterID on this connection's store.
func (c *Conn) NewOpLog(cfg OpLogConfig) (OpLog, error) {
	if err := checkClusterID(cfg.ClusterID); err != nil {
		return nil, err
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.RedisWaitTimeout <= 0 {
		cfg.RedisWaitTimeout = time.Second
	}
	if c.etcd != nil {
		return newEtcdOpLog(c, cfg), nil
	}
	return newRedisOpLog(c, cfg), nil
}

// checkAppend validates a batch and fills in the checksums (on a copy).
func checkAppend(entries []Entry) ([]Entry, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	out := make([]Entry, len(entries))
	for i, e := range entries {
		if e.Seq == 0 {
			return nil, fmt.Errorf("ha: oplog entry %d has sequence id 0 (ids start at 1): %w", i, ErrSeqMismatch)
		}
		if i > 0 && e.Seq != entries[0].Seq+uint64(i) {
			return nil, fmt.Errorf("ha: oplog entry %d has sequence id %d, want %d (ids must be consecutive): %w",
				i, e.Seq, entries[0].Seq+uint64(i), ErrSeqMismatch)
		}
		e.CRC = e.Checksum()
		out[i] = e
	}
	return out, nil
}

// verify checks a read entry's checksum.
func verify(e Entry) error {
	if got := e.Checksum(); got != e.CRC {
		return fmt.Errorf("ha: oplog entry %d: checksum %08x, stored %08x: %w", e.Seq, got, e.CRC, ErrCorrupt)
	}
	return nil
}

// checkRead verifies that entries start at seq (a later start means the ones before were
// truncated), are consecutive and pass their checksums.
func checkRead(seq uint64, entries []Entry) error {
	for i, e := range entries {
		if i == 0 && e.Seq != seq {
			if e.Seq > seq {
				return fmt.Errorf("ha: oplog from %d asked, oldest kept is %d: %w", seq, e.Seq, ErrCompacted)
			}
			return fmt.Errorf("ha: oplog read from %d returned %d first: %w", seq, e.Seq, ErrCorrupt)
		}
		if i > 0 && e.Seq != entries[i-1].Seq+1 {
			return fmt.Errorf("ha: oplog has a gap between %d and %d: %w", entries[i-1].Seq, e.Seq, ErrCorrupt)
		}
		if err := verify(e); err != nil {
			return err
		}
	}
	return nil
}

// Batch encoding (etcd values): "MCO1", count u32, then per entry seq u64, type u32,
// crc u32, payload length u32, payload. Big-endian.
const batchMagic = "MCO1"

func encodeBatch(entries []Entry) []byte {
	n := 8
	for _, e := range entries {
		n += 20 + len(e.Payload)
	}
	b := make([]byte, 0, n)
	b = append(b, batchMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	for _, e := range entries {
		b = binary.BigEndian.AppendUint64(b, e.Seq)
		b = binary.BigEndian.AppendUint32(b, e.Type)
		b = binary.BigEndian.AppendUint32(b, e.CRC)
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.Payload)))
		b = append(b, e.Payload...)
	}
	return b
}

func decodeBatch(b []byte) ([]Entry, error) {
	if len(b) < 8 || string(b[:4]) != batchMagic {
		return nil, fmt.Errorf("ha: oplog batch has no %q header: %w", batchMagic, ErrCorrupt)
	}
	n := binary.BigEndian.Uint32(b[4:])
	b = b[8:]
	if uint64(n) > uint64(len(b))/20 {
		return nil, fmt.Errorf("ha: oplog batch claims %d entries in %d bytes: %w", n, len(b), ErrCorrupt)
	}
	out := make([]Entry, 0, n)
	for i := uint32(0); i < n; i++ {
		if len(b) < 20 {
			return nil, fmt.Errorf("ha: oplog batch truncated at entry %d: %w", i, ErrCorrupt)
		}
		e := Entry{Seq: binary.BigEndian.Uint64(b), Type: binary.BigEndian.Uint32(b[8:]), CRC: binary.BigEndian.Uint32(b[12:])}
		l := binary.BigEndian.Uint32(b[16:])
		b = b[20:]
		if uint64(l) > uint64(len(b)) {
			return nil, fmt.Errorf("ha: oplog batch entry %d claims %d payload bytes, %d left: %w", i, l, len(b), ErrCorrupt)
		}
		e.Payload = append([]byte(nil), b[:l]...)
		b = b[l:]
		out = append(out, e)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("ha: oplog batch has %d trailing bytes: %w", len(b), ErrCorrupt)
	}
	return out, nil
}

// tail is Tail for both stores. read returns the entries from seq on (and reports truncation
// and corruption, which end the tail); every non-empty read goes to fn. When nothing is left,
// wait blocks until something may have been appended since the last read (or a while passed);
// then tail reads again. Other read errors are retried after a pause.
func tail(ctx context.Context, seq uint64, fn func([]Entry) error,
	read func(ctx context.Context, seq uint64) ([]Entry, error), wait func(ctx context.Context, seq uint64)) error {
	if seq == 0 {
		seq = 1
	}
	for {
		entries, err := read(ctx, seq)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, ErrCompacted) || errors.Is(err, ErrCorrupt) {
				return err
			}
			if sleepCtx(ctx, retryDelay(DefaultTTL)) != nil {
				return ctx.Err()
			}
			continue
		}
		if len(entries) > 0 {
			if err := fn(entries); err != nil {
				return err
			}
			seq = entries[len(entries)-1].Seq + 1
			continue
		}
		wait(ctx, seq)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
