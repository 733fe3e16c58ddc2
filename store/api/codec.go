package api

import (
	"encoding/json"
	"fmt"

	"google.golang.org/grpc/encoding"
)

// CodecName is the gRPC content-subtype of the master service ("application/grpc+json").
const CodecName = "json"

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error) {
	if b, ok := fastMarshal(v); ok { // the hot messages (fastjson.go)
		return b, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return b, nil
}

// marshalAppend is Marshal appending to dst when v is one of the hot messages (the framed
// server reuses one buffer per connection for its answers).
func (c jsonCodec) marshalAppend(dst []byte, v any) ([]byte, error) {
	if b, ok := fastAppend(dst, v); ok {
		return b, nil
	}
	return c.Marshal(v)
}

func (jsonCodec) Unmarshal(data []byte, v any) error {
	if fastUnmarshal(data, v) { // the hot messages, when within the subset (fastjson.go)
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	return nil
}

func (jsonCodec) Name() string { return CodecName }

func init() { encoding.RegisterCodec(jsonCodec{}) }
