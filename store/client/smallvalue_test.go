package client

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/master"
)

// Small values go with their PutEnd and come back with GetReplicaList (no replica read): single
// and batch puts and gets, several parts, a value just over the limit, an upsert, a removal,
// a client that sends none; every answer exact.
func TestSmallValuesAnsweredByTheMaster(t *testing.T) {
	srv, addr := startMaster(t, func(c *master.Config) { c.SmallValueCacheBytes = 1 << 20 })
	newClient(t, addr, 64<<20) // holds the replicas
	c := newClient(t, addr, 0)
	ctx := context.Background()
	cached := func() uint64 {
		var n uint64
		srv.View(func(s *master.State) { n = s.CachedValueBytes() })
		return n
	}
	small, limit, over := pattern(100, 1), pattern(DefaultSmallValueBytes, 2), pattern(DefaultSmallValueBytes+1, 3)
	for key, v := range map[string][]byte{"small": small, "limit": limit, "over": over} {
		if err := c.PutValue(ctx, key, v, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Two parts of one value, sent as one.
	if errs := c.Put(ctx, []Item{{Key: "parts", Parts: [][]byte{small[:40], small[40:]}}}, PutOptions{}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if got, want := cached(), uint64(100+DefaultSmallValueBytes+100); got != want {
		t.Fatalf("the master caches %d bytes, want %d", got, want)
	}
	before := c.CachedReads()
	for key, want := range map[string][]byte{"small": small, "limit": limit, "over": over, "parts": small} {
		got, err := c.GetValue(ctx, key)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("get %s: %d bytes, %v", key, len(got), err)
		}
	}
	if n := c.CachedReads() - before; n != 3 {
		t.Fatalf("%d gets served from the cache, want 3 (small, limit, parts)", n)
	}
	// A batch put sends no bytes (smallvalue.go): its values are read from replicas; a batch get
	// of values single puts sent is answered with them.
	var items []Item
	for i := range 8 {
		items = append(items, Item{Key: "b" + string(rune('0'+i)), Parts: [][]byte{pattern(64*(i+1), byte(i))}})
	}
	items = append(items, Item{Key: "bover", Parts: [][]byte{over}})
	for i, err := range c.Put(ctx, items, PutOptions{}) {
		if err != nil {
			t.Fatalf("batch put %d: %v", i, err)
		}
	}
	before = c.CachedReads()
	dst := make([]Item, len(items))
	for i, it := range items {
		dst[i] = Item{Key: it.Key, Parts: [][]byte{make([]byte, len(it.Parts[0]))}}
	}
	sizes, errs := c.Get(ctx, dst, GetOptions{})
	for i := range items {
		if errs[i] != nil || sizes[i] != uint64(len(items[i].Parts[0])) || !bytes.Equal(dst[i].Parts[0], items[i].Parts[0]) {
			t.Fatalf("batch get %s: %d, %v", items[i].Key, sizes[i], errs[i])
		}
	}
	if n := c.CachedReads() - before; n != 0 {
		t.Fatalf("%d batch items served from the cache, want 0", n)
	}
	before = c.CachedReads()
	bdst := []Item{{Key: "small", Parts: [][]byte{make([]byte, 100)}}, {Key: "over", Parts: [][]byte{make([]byte, len(over))}},
		{Key: "limit", Parts: [][]byte{make([]byte, len(limit))}}}
	if _, errs := c.Get(ctx, bdst, GetOptions{}); errs[0] != nil || errs[1] != nil || errs[2] != nil ||
		!bytes.Equal(bdst[0].Parts[0], small) || !bytes.Equal(bdst[1].Parts[0], over) || !bytes.Equal(bdst[2].Parts[0], limit) {
		t.Fatalf("batch get of single puts' values: %v", errs)
	}
	if n := c.CachedReads() - before; n != 2 {
		t.Fatalf("%d batch items served from the cache, want 2 (small, limit)", n)
	}
	// An upsert's bytes replace the old ones; a removal forgets them.
	if err := c.PutValue(ctx, "small", limit, PutOptions{Upsert: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetValue(ctx, "small"); err != nil || !bytes.Equal(got, limit) {
		t.Fatalf("get after the upsert: %d bytes, %v", len(got), err)
	}
	total := cached()
	if errs := c.Remove(ctx, []string{"small"}, true); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if got := cached(); got != total-DefaultSmallValueBytes {
		t.Fatalf("after the removal the master caches %d bytes, want %d", got, total-DefaultSmallValueBytes)
	}
	if _, err := c.GetValue(ctx, "small"); api.CodeOf(err) != api.OBJECT_NOT_FOUND {
		t.Fatalf("get of a removed key: %v", err)
	}
	// A client told to send none (MC_STORE_SMALL_VALUE_BYTES=0): its values are read from replicas.
	off := newClientWith(t, addr, 0, Config{SmallValueBytes: -1})
	total = cached()
	if err := off.PutValue(ctx, "plain", small, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before = off.CachedReads()
	if got, err := off.GetValue(ctx, "plain"); err != nil || !bytes.Equal(got, small) || off.CachedReads() != before || cached() != total {
		t.Fatalf("a client sending no bytes: %d bytes, %v, %d cached reads, cache %d -> %d", len(got), err, off.CachedReads()-before, total, cached())
	}
}

// More small values than the master's cache holds: the most recently used ones are answered
// with the bytes (the older ones make room and are read from their replicas), every answer
// exact.
func TestSmallValuesCacheKeepsTheRecentOnes(t *testing.T) {
	const n, held = 64, 8
	srv, addr := startMaster(t, func(c *master.Config) { c.SmallValueCacheBytes = held * DefaultSmallValueBytes })
	newClient(t, addr, 64<<20)
	c := newClient(t, addr, 0)
	ctx := context.Background()
	key := func(i int) string { return "v" + strconv.Itoa(i) }
	for i := range n {
		if err := c.PutValue(ctx, key(i), pattern(DefaultSmallValueBytes, byte(i)), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(i int) {
		t.Helper()
		if got, err := c.GetValue(ctx, key(i)); err != nil || !bytes.Equal(got, pattern(DefaultSmallValueBytes, byte(i))) {
			t.Fatalf("get %s: %d bytes, %v", key(i), len(got), err)
		}
	}
	before := c.CachedReads()
	for i := n - held; i < n; i++ {
		get(i)
	}
	if got := c.CachedReads() - before; got != held {
		t.Fatalf("%d of the last %d values answered from the cache, want all", got, held)
	}
	before = c.CachedReads()
	for i := range n - held {
		get(i)
	}
	if got := c.CachedReads() - before; got != 0 {
		t.Fatalf("%d older values answered from the cache, want 0", got)
	}
	// The master's metrics say the same.
	if m := srv.Snapshot(); m.ValueCacheBytes != held*DefaultSmallValueBytes || m.ValueCacheHits != held || m.ValueCacheDrops != n-held {
		t.Fatalf("metrics: value cache %d bytes, %d hits, %d drops; want %d, %d, %d", m.ValueCacheBytes, m.ValueCacheHits,
			m.ValueCacheDrops, held*DefaultSmallValueBytes, held, n-held)
	}
}
