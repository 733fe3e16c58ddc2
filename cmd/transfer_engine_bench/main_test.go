package main

import (
	"context"
	"testing"

	"github.com/mooncake-go/mooncake/engine"
)

func TestBaselineAndInitiator(t *testing.T) {
	*bufferSize, *blockSize, *batchSize, *duration, *threads = 4<<20, 1<<20, 2, 0.2, 2
	*localName = "127.0.0.1"
	baseline()
	tgt, err := engine.New(context.Background(), engine.Config{LocalServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	if _, err := tgt.AllocateShared(4 << 20); err != nil {
		t.Fatal(err)
	}
	*segmentID = tgt.SegmentName()
	for _, op := range []string{"write", "read"} {
		*operation = op
		initiator()
	}
}
