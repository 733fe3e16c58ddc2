package benchcmd

import (
	"context"
	"testing"

	"github.com/mooncake-go/mooncake/engine"
)

func TestBaselineAndInitiator(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	o.bufferSize, o.blockSize, o.batchSize, o.duration, o.threads = 4<<20, 1<<20, 2, 0.2, 2
	o.localName = "127.0.0.1"
	o.baseline()
	tgt, err := engine.New(context.Background(), engine.Config{LocalServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	if _, err := tgt.AllocateShared(4 << 20); err != nil {
		t.Fatal(err)
	}
	o.segmentID = tgt.SegmentName()
	for _, op := range []string{"write", "read"} {
		o.operation = op
		o.initiator()
	}
}

func TestMainBadCommandLine(t *testing.T) {
	for _, args := range [][]string{{"--mode=nope"}, {"--nosuchflag"}, {"extra"}} {
		if got := Main(args); got != 2 {
			t.Errorf("Main(%q) = %d, want 2", args, got)
		}
	}
	if got := Main([]string{"-h"}); got != 0 {
		t.Errorf("Main(-h) = %d, want 0", got)
	}
}
