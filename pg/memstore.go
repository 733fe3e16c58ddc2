package pg

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// MemStore is an in-memory Store: the rendezvous of groups whose ranks all live in one process
// (tests, single-process tools). The zero value is not usable; call NewMemStore.
type MemStore struct {
	mu sync.Mutex
	m  map[string][]byte
	c  *sync.Cond
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	kv := &MemStore{m: map[string][]byte{}}
	kv.c = sync.NewCond(&kv.mu)
	return kv
}

func (kv *MemStore) Set(k string, v []byte) error {
	kv.mu.Lock()
	kv.m[k] = append([]byte(nil), v...)
	kv.c.Broadcast()
	kv.mu.Unlock()
	return nil
}

func (kv *MemStore) Get(k string, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, func() { kv.mu.Lock(); kv.c.Broadcast(); kv.mu.Unlock() })
	defer t.Stop()
	kv.mu.Lock()
	defer kv.mu.Unlock()
	for {
		if v, ok := kv.m[k]; ok {
			return v, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("key %q did not appear within %s", k, timeout)
		}
		kv.c.Wait()
	}
}

func (kv *MemStore) Check(k string) (bool, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	_, ok := kv.m[k]
	return ok, nil
}

func (kv *MemStore) Add(k string, d int64) (int64, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	n, _ := strconv.ParseInt(string(kv.m[k]), 10, 64)
	n += d
	kv.m[k] = []byte(strconv.FormatInt(n, 10))
	kv.c.Broadcast()
	return n, nil
}
