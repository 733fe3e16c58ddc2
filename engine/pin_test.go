package engine

import (
	"bytes"
	"testing"
)

// TestMapRemotePinned: a pinned view stays mapped (and shows the shared pages) after the
// peer's transport mapping is dropped, after the owner frees the buffer, and after the
// engines close; MC_FORCE_TCP and plain memory give no view.
func TestMapRemotePinned(t *testing.T) {
	ini, tgt, seg, sh, plain, _ := pair(t, false)
	copy(sh[100:], "pinned")
	v, rel, ok, err := ini.MapRemotePinned(seg, uint64(addr(sh)), 4096)
	if err != nil || !ok {
		t.Fatalf("MapRemotePinned: %v %v", ok, err)
	}
	if string(v[100:106]) != "pinned" {
		t.Fatalf("view shows %q", v[100:106])
	}
	// A second, unpinned view of the same mapping, then drop the transport's mapping as a
	// dead-peer detection does.
	if _, ok, err := ini.MapRemote(seg, uint64(addr(sh)), 64); !ok || err != nil {
		t.Fatal(ok, err)
	}
	ini.shm.Forget(tgt.pid)
	copy(v[200:], "still") // must not fault
	if string(sh[200:205]) != "still" {
		t.Fatal("pinned view no longer shares the pages")
	}
	// Local pinned view of the target's own buffer survives FreeShared.
	lv, lrel, ok, err := tgt.MapRemotePinned(LocalSegment, uint64(addr(sh)), 4096)
	if err != nil || !ok {
		t.Fatalf("local MapRemotePinned: %v %v", ok, err)
	}
	if err := tgt.FreeShared(addr(sh)); err != nil {
		t.Fatal(err)
	}
	if string(lv[200:205]) != "still" {
		t.Fatal("local pinned view lost its contents")
	}
	copy(v[300:], "after free")
	if !bytes.Equal(lv[300:310], []byte("after free")) {
		t.Fatal("views diverged after FreeShared")
	}
	ini.Close()
	tgt.Close()
	copy(v[400:], "after close") // still mapped
	lrel()
	lrel() // twice is fine
	rel()
	// Plain memory and closed engines give no view.
	if _, _, ok, err := tgt.MapRemotePinned(LocalSegment, uint64(addr(plain)), 64); ok || err == nil {
		t.Fatalf("closed engine: %v %v", ok, err)
	}
}

func TestMapRemotePinnedPlainAndTCP(t *testing.T) {
	ini, _, seg, sh, plain, _ := pair(t, true)
	if _, rel, ok, err := ini.MapRemotePinned(seg, uint64(addr(sh)), 64); ok || err != nil || rel != nil {
		t.Fatalf("MC_FORCE_TCP: %v %v", ok, err)
	}
	if _, _, ok, err := ini.MapRemotePinned(seg, uint64(addr(plain)), 64); ok || err != nil {
		t.Fatalf("plain memory: %v %v", ok, err)
	}
	if _, _, ok, _ := ini.MapRemotePinned(LocalSegment, uint64(addr(plain)), 64); ok {
		t.Fatal("unregistered local memory")
	}
}
