package metadata

import (
	"context"
	"errors"
)

// ErrNotFound is returned by Store.Get when the key does not exist.
var ErrNotFound = errors.New("metadata: key not found")

// Store is a central metadata store holding segment descriptors and RPC endpoints
// (HTTP metadata server, etcd or Redis). P2PHANDSHAKE mode has no Store: peers ask each
// other directly through the engine's listener.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, error) // ErrNotFound (wrapped) on a miss
	Put(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
	Close() error
}
