package master

import (
	"log"
	"net"
	"sync"
	"time"
)

// refusalLog logs connections the RPC port refused (no token, wrong token, failed TLS), at
// most refusalBurst lines per refusalWindow; the rest are counted and summed up in the next
// window's first line, so that a scan or a flood cannot fill the log.
type refusalLog struct {
	mu         sync.Mutex
	windowFrom time.Time
	lines      int
	dropped    int
}

const (
	refusalWindow = 10 * time.Second
	refusalBurst  = 5
)

func (r *refusalLog) log(remote net.Addr, why error) {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.windowFrom) >= refusalWindow {
		if r.dropped > 0 {
			log.Printf("mooncake_master: %d more connections refused in the last %v (not logged one by one)", r.dropped, refusalWindow)
		}
		r.windowFrom, r.lines, r.dropped = now, 0, 0
	}
	if r.lines >= refusalBurst {
		r.dropped++
		r.mu.Unlock()
		return
	}
	r.lines++
	r.mu.Unlock()
	log.Printf("mooncake_master: refused rpc connection from %v: %v", remote, why)
}
