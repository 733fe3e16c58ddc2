package client

import (
	"github.com/mooncake-go/mooncake/store/api"
)

// RegisterBuffer registers user memory [addr, addr+length) with the engine for zero-copy
// PutFrom/GetInto.
func (c *Client) RegisterBuffer(addr uintptr, length uint64) error {
	if addr == 0 || length == 0 {
		return api.Errorf(api.INVALID_PARAMS, "register_buffer needs a non-null address and a non-zero length")
	}
	if err := c.eng.RegisterLocalMemory(addr, length, "cpu:0"); err != nil {
		return api.Errorf(api.INVALID_PARAMS, "register buffer %#x (+%d): %v", addr, length, err)
	}
	c.regMu.Lock()
	c.regions[addr] = length
	c.regMu.Unlock()
	return nil
}

// UnregisterBuffer undoes RegisterBuffer.
func (c *Client) UnregisterBuffer(addr uintptr) error {
	c.regMu.Lock()
	_, ok := c.regions[addr]
	delete(c.regions, addr)
	c.regMu.Unlock()
	if !ok {
		return api.Errorf(api.INVALID_PARAMS, "buffer %#x was not registered with this store", addr)
	}
	if err := c.eng.UnregisterLocalMemory(addr); err != nil {
		return api.Errorf(api.INVALID_PARAMS, "unregister buffer %#x: %v", addr, err)
	}
	return nil
}

func (c *Client) registered(addr uintptr, n uint64) bool {
	c.regMu.RLock()
	defer c.regMu.RUnlock()
	for a, l := range c.regions {
		if addr >= a && addr+uintptr(n) <= a+uintptr(l) {
			return true
		}
	}
	return false
}
