package api

import (
	"encoding/binary"
	"fmt"
)

// Binary attachments: the byte values of a framed-RPC message sent as raw bytes after its JSON
// instead of as base64 strings inside it.
//
// A small value travels with its PutEnd and back in GetReplicaList answers (store/master's value
// cache). As base64 in JSON it costs an encode and a decode of 4/3 of its size at each end
// and a scan of the string; as an attachment it is copied once into the frame and read in
// place. The messages that carry values (KeyRequest.Value, BatchKeysRequest.Values,
// GetReplicaListResponse.Value and the batch answer's) have them moved out before the JSON is
// written (detachValues, on a shallow copy: the caller's message is not changed) and put back
// after it is read (attachValues), so the JSON codec, fast path and encoding/json alike, never
// sees them.
//
// A client asks for the layout by prefixing the method name with attachMark. A master that
// predates it answers such a call "unknown method" (codes.Unimplemented, the connection kept),
// and the client then sends every later call of that connection in the plain layout. A master
// answers a marked call in the attachment layout (reply kind 2) and a plain call as before, so
// old clients are unchanged.
//
//	marked request:  u32 n | u8 len(method) | attachMark method | u32 len(JSON) | JSON | attachments
//	reply kind 2:    u32 n | u8 2 | u32 len(JSON) | JSON | attachments
//	attachments:     u32 count | count x (u32 len | bytes)
const attachMark = "+"

// replyAttached is the reply kind of a success answered in the attachment layout.
const replyAttached = 2

// detachValues returns v without its byte values (a shallow copy of v, or v itself when it
// carries none) and the values in the order attachValues puts them back.
func detachValues(v any) (any, [][]byte) {
	switch m := v.(type) {
	case *KeyRequest:
		if len(m.Value) == 0 {
			return v, nil
		}
		c := *m
		c.Value = nil
		return &c, [][]byte{m.Value}
	case *BatchKeysRequest:
		if len(m.Values) == 0 {
			return v, nil
		}
		c := *m
		c.Values = nil
		return &c, m.Values
	case *GetReplicaListResponse:
		if len(m.Value) == 0 {
			return v, nil
		}
		c := *m
		c.Value = nil
		return &c, [][]byte{m.Value}
	case *BatchGetReplicaListResponse:
		var vals [][]byte
		for i := range m.Results {
			if len(m.Results[i].Value) > 0 {
				vals = make([][]byte, len(m.Results))
				break
			}
		}
		if vals == nil {
			return v, nil
		}
		c := *m
		c.Results = make([]GetReplicaListResponse, len(m.Results))
		for i, r := range m.Results {
			vals[i] = r.Value
			r.Value = nil
			c.Results[i] = r
		}
		return &c, vals
	}
	return v, nil
}

// attachValues puts the values detachValues took out back into v (read from the wire: v has
// none). Values alias vals.
func attachValues(v any, vals [][]byte) error {
	if len(vals) == 0 {
		return nil
	}
	switch m := v.(type) {
	case *KeyRequest:
		if len(vals) == 1 {
			m.Value = vals[0]
			return nil
		}
	case *BatchKeysRequest:
		if len(vals) <= len(m.Keys) {
			m.Values = vals
			return nil
		}
	case *GetReplicaListResponse:
		if len(vals) == 1 {
			m.Value = vals[0]
			return nil
		}
	case *BatchGetReplicaListResponse:
		if len(vals) == len(m.Results) {
			for i := range vals {
				m.Results[i].Value = vals[i]
			}
			return nil
		}
	}
	return fmt.Errorf("%d attached values do not fit a %T", len(vals), v)
}

// attachedParts is the frame's parts after its kind or method: u32 len(JSON), JSON, the count,
// then each value's length and bytes.
func attachedParts(body []byte, vals [][]byte) [][]byte {
	u32 := func(n int) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(n)) }
	parts := make([][]byte, 0, 3+2*len(vals))
	parts = append(parts, u32(len(body)), body, u32(len(vals)))
	for _, v := range vals {
		parts = append(parts, u32(len(v)), v)
	}
	return parts
}

// splitAttached reads a message in the attachment layout: its JSON and its values (aliasing b).
func splitAttached(b []byte) ([]byte, [][]byte, error) {
	bad := func(what string) ([]byte, [][]byte, error) {
		return nil, nil, fmt.Errorf("malformed attachment layout: %s", what)
	}
	if len(b) < 4 {
		return bad("no JSON length")
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return bad("JSON longer than the frame")
	}
	body, b := b[:n], b[n:]
	if len(b) < 4 {
		return bad("no value count")
	}
	count := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(count) > uint64(len(b))/4 {
		return bad("more values than the frame holds")
	}
	vals := make([][]byte, count)
	for i := range vals {
		if len(b) < 4 {
			return bad("value length missing")
		}
		l := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(l) > uint64(len(b)) {
			return bad("value longer than the frame")
		}
		if l > 0 {
			vals[i] = b[:l:l]
		}
		b = b[l:]
	}
	if len(b) != 0 {
		return bad("bytes after the last value")
	}
	return body, vals, nil
}
