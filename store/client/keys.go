package client

import (
	"context"
	"regexp"
	"slices"

	"github.com/mooncake-go/mooncake/store/api"
)

// Queries and removal by key, and how the client names keys (tenants).

// Exists looks keys up: sizes[i] is the size of keys[i]'s value, 0 when the key is not stored
// (a stored value is never empty), and errs[i] its error. One key asks the master with
// ExistKey, several with one BatchExistKey.
func (c *Client) Exists(ctx context.Context, keys []string) ([]uint64, []error) {
	sizes := make([]uint64, len(keys))
	if len(keys) == 0 {
		return sizes, nil
	}
	ik, err := c.tkeys(keys)
	if err != nil {
		return sizes, fill(len(keys), err)
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	var results []api.ExistKeyResponse
	if len(ik) == 1 {
		r, err := c.master.ExistKey(rctx, &api.KeyRequest{ClientID: c.id, Key: ik[0]})
		if err != nil {
			return sizes, fill(1, c.rpcErr("is_exist "+quote(ik[0]), err))
		}
		results = []api.ExistKeyResponse{*r}
	} else {
		r, err := c.master.BatchExistKey(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: ik})
		if err != nil {
			return sizes, fill(len(ik), c.rpcErr("batch is_exist", err))
		}
		if err := answered(r.Status, len(r.Results), len(ik)); err != nil {
			return sizes, fill(len(ik), err)
		}
		results = r.Results
	}
	errs := make([]error, len(ik))
	for i, res := range results {
		if errs[i] = res.Err(); errs[i] == nil && res.Exists {
			sizes[i] = res.Size
		}
	}
	return sizes, errs
}

// Remove deletes keys; a leased or hard-pinned key needs force. errs[i] is keys[i]'s error.
// One key asks the master with Remove, several with one BatchRemove.
func (c *Client) Remove(ctx context.Context, keys []string, force bool) []error {
	if len(keys) == 0 {
		return nil
	}
	ik, err := c.tkeys(keys)
	if err != nil {
		return fill(len(keys), err)
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	if len(ik) == 1 {
		st, err := c.master.Remove(rctx, &api.RemoveRequest{ClientID: c.id, Key: ik[0], Force: force})
		if err != nil {
			return []error{c.rpcErr("remove "+quote(ik[0]), err)}
		}
		return []error{st.Err()}
	}
	r, err := c.master.BatchRemove(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: ik, Force: force})
	if err == nil {
		err = answered(r.Status, len(r.Results), len(ik))
	}
	if err != nil {
		return fill(len(ik), c.rpcErr("batch remove", err))
	}
	errs := make([]error, len(ik))
	for i, s := range r.Results {
		errs[i] = s.Err()
	}
	return errs
}

// answered is the error of a batch answer: its status's, or that it has not one result per key.
func answered(st api.Status, results, keys int) error {
	if err := st.Err(); err != nil {
		return err
	}
	if results != keys {
		return api.Errorf(api.INTERNAL_ERROR, "the master answered %d of %d keys", results, keys)
	}
	return nil
}

// RemoveByRegex removes this client's tenant's keys matching pattern (RE2 syntax) and returns
// how many.
func (c *Client) RemoveByRegex(ctx context.Context, pattern string, force bool) (int64, error) {
	if _, err := regexp.Compile(pattern); err != nil {
		return 0, api.Errorf(api.INVALID_PARAMS, "bad regular expression %q: %v", pattern, err)
	}
	rctx, cancel := c.rpcCtx(ctx)
	r, err := c.master.RemoveByRegex(rctx, &api.RemoveByRegexRequest{ClientID: c.id, Pattern: pattern, Force: force, Scoped: true, Tenant: c.tenant})
	cancel()
	if err != nil {
		return 0, c.rpcErr("remove_by_regex", err)
	}
	return r.Count, r.Err()
}

// RemoveAll removes every key of this client's tenant and returns how many; keepHeld leaves
// the keys a plain remove would refuse (leased, hard-pinned).
func (c *Client) RemoveAll(ctx context.Context, keepHeld bool) (int64, error) {
	rctx, cancel := c.rpcCtx(ctx)
	r, err := c.master.RemoveAll(rctx, &api.RemoveAllRequest{ClientID: c.id, Scoped: true, Tenant: c.tenant, KeepHeld: keepHeld})
	cancel()
	if err != nil {
		return 0, c.rpcErr("remove_all", err)
	}
	return r.Count, r.Err()
}

// quote is how this package's messages show a key (api.DisplayKey).
func quote(key string) string {
	return api.DisplayKey(key)
}

// tkey is the internal key of the caller's key k: k itself for the default tenant, else k in
// this client's tenant namespace (api/tenant.go). Keys holding the namespace separator are
// refused, so that no caller can name another tenant's keys.
func (c *Client) tkey(k string) (string, error) {
	if err := api.CheckUserKey(k); err != nil {
		return "", err
	}
	return api.TenantKey(c.tenant, k), nil
}

// tkeys is tkey for many keys (the same slice when nothing changes); one bad key fails them all.
func (c *Client) tkeys(ks []string) ([]string, error) {
	out, cloned := ks, false
	for i, k := range ks {
		ik, err := c.tkey(k)
		if err != nil {
			return nil, err
		}
		if ik != k {
			if !cloned {
				out, cloned = slices.Clone(ks), true
			}
			out[i] = ik
		}
	}
	return out, nil
}

func fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}
