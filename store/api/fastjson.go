package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"unsafe"
)

// The hot messages' JSON without reflection.
//
// Every master call encodes its request and reply with the JSON codec (codec.go). For the
// messages of the calls a serving system makes most (is_exist, get, put and their batches),
// encoding/json's reflection was a third of a client's CPU per batch_is_exist of 64 keys and a
// fifth of the master's (perf, 2026-12-06). The types below write and read their own JSON:
//
//   - the writers produce exactly encoding/json's bytes (field order, omitempty, escaping:
//     ASCII strings are escaped here as encoding/json escapes them, others with a byte it would
//     escape are written by encoding/json itself), which fastjson_test.go checks;
//   - the readers accept a strict subset: the fields of the type, ASCII strings (whose
//     escapes, if any, are the two-character ones and \u escapes of ASCII characters: the
//     reservation names of reserved puts hold 0x1f), integers, true, false and null for
//     slices. Anything else (an unknown or differently cased field, a non-ASCII byte or \u
//     escape, a float) makes the reader give up, and
//     the codec decodes the message with encoding/json instead, so every input decodes to what
//     encoding/json makes of it. A reader fills its value only once the whole message is read.

// fastMarshal writes v's JSON when v is one of the hot messages; false: use encoding/json.
// It switches on the exact type: a type that embeds Status does not inherit its writer.
func fastMarshal(v any) ([]byte, bool) { return fastAppend(make([]byte, 0, 256), v) }

// fastAppend is fastMarshal appending to b.
func fastAppend(b []byte, v any) ([]byte, bool) {
	switch m := v.(type) {
	case *KeyRequest:
		return m.appendJSON(b)
	case *BatchKeysRequest:
		return m.appendJSON(b)
	case *Status:
		return m.appendJSON(b)
	case *ExistKeyResponse:
		return m.appendJSON(b)
	case *GetReplicaListResponse:
		return m.appendJSON(b)
	case *PutStartResponse:
		return m.appendJSON(b)
	case *BatchStatusResponse:
		return m.appendJSON(b)
	case *BatchExistKeyResponse:
		return m.appendJSON(b)
	case *BatchGetReplicaListResponse:
		return m.appendJSON(b)
	case *BatchPutStartResponse:
		return m.appendJSON(b)
	}
	return nil, false
}

// fastUnmarshal reads data into v when v is one of the hot messages and data is within the
// subset; false: v is unchanged, use encoding/json.
func fastUnmarshal(data []byte, v any) bool {
	switch m := v.(type) {
	case *KeyRequest:
		return decodeAll(m, data)
	case *BatchKeysRequest:
		return decodeAll(m, data)
	case *Status:
		return decodeAll(m, data)
	case *ExistKeyResponse:
		return decodeAll(m, data)
	case *GetReplicaListResponse:
		return decodeAll(m, data)
	case *PutStartResponse:
		return decodeAll(m, data)
	case *BatchStatusResponse:
		return m.decodeJSON(data)
	case *BatchExistKeyResponse:
		return m.decodeJSON(data)
	case *BatchGetReplicaListResponse:
		return m.decodeJSON(data)
	case *BatchPutStartResponse:
		return m.decodeJSON(data)
	}
	return false
}

// decodeAll reads all of data into *r through its decode method; false (data outside the
// subset, or more than one value) leaves *r unchanged.
func decodeAll[T any, P interface {
	*T
	decode(*jdec)
}](r P, data []byte) bool {
	var t T
	d := jdec{b: data, ok: true}
	P(&t).decode(&d)
	if !d.end() {
		return false
	}
	*r = t
	return true
}

// elemAppend writes one batch result (the element types of the batch responses above).
func elemAppend(b []byte, v any) ([]byte, bool) {
	switch m := v.(type) {
	case *Status:
		return m.appendJSON(b)
	case *ExistKeyResponse:
		return m.appendJSON(b)
	case *GetReplicaListResponse:
		return m.appendJSON(b)
	case *PutStartResponse:
		return m.appendJSON(b)
	}
	return b, false
}

// elemDecode reads one batch result; false for a type without a reader.
func elemDecode(d *jdec, v any) bool {
	switch m := v.(type) {
	case *Status:
		m.decode(d)
	case *ExistKeyResponse:
		m.decode(d)
	case *GetReplicaListResponse:
		m.decode(d)
	case *PutStartResponse:
		m.decode(d)
	default:
		return false
	}
	return true
}

// ---- writing ----

func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

func appendStr(b []byte, s string) []byte {
	if plainString(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	if isASCII(s) {
		return appendEscaped(b, s)
	}
	q, _ := json.Marshal(s) // a string always encodes (UTF-8 and its checks are encoding/json's)
	return append(b, q...)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// appendEscaped writes an ASCII string as encoding/json does: the short escapes of '"', '\\',
// \b, \f, \n, \r and \t, \u00XX for the other control bytes and for '<', '>' and '&' (its HTML
// escaping), everything else as it is. A reserved put's reservation name holds 0x1f: every
// such PutEnd went through json.Marshal for it.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			if c < 0x20 || c == '<' || c == '>' || c == '&' {
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}

func appendField(b []byte, name string) []byte {
	if len(b) > 0 && b[len(b)-1] != '{' && b[len(b)-1] != '[' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

func (s *Status) appendFields(b []byte) []byte {
	b = appendField(b, "code")
	b = strconv.AppendInt(b, int64(s.Code), 10)
	if s.Message != "" {
		b = appendField(b, "message")
		b = appendStr(b, s.Message)
	}
	return b
}

func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendStr(b, s)
	}
	return append(b, ']')
}

func (r *KeyRequest) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, '{')
	b = appendField(b, "client_id")
	b = appendStr(b, r.ClientID)
	b = appendField(b, "key")
	b = appendStr(b, r.Key)
	if len(r.Value) > 0 {
		b = appendField(b, "value")
		b = appendBytes(b, r.Value)
	}
	if r.Reserved != "" {
		b = appendField(b, "reserved")
		b = appendStr(b, r.Reserved)
	}
	if len(r.Confirmed) > 0 {
		b = appendField(b, "confirmed")
		b = appendStrings(b, r.Confirmed)
	}
	return append(b, '}'), true
}

// appendBytes writes a []byte as encoding/json does: standard base64 in a string, null for nil.
func appendBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

func (r *BatchKeysRequest) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, '{')
	b = appendField(b, "client_id")
	b = appendStr(b, r.ClientID)
	b = appendField(b, "keys")
	b = appendStrings(b, r.Keys)
	if r.Force {
		b = appendField(b, "force")
		b = append(b, "true"...)
	}
	if len(r.Values) > 0 {
		b = appendField(b, "values")
		b = append(b, '[')
		for i, v := range r.Values {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendBytes(b, v)
		}
		b = append(b, ']')
	}
	return append(b, '}'), true
}

func (s *Status) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, '{')
	b = s.appendFields(b)
	return append(b, '}'), true
}

func (r *ExistKeyResponse) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, '{')
	b = r.Status.appendFields(b)
	b = appendField(b, "exists")
	b = appendBool(b, r.Exists)
	if r.Size != 0 {
		b = appendField(b, "size")
		b = strconv.AppendUint(b, r.Size, 10)
	}
	return append(b, '}'), true
}

func (r *Replica) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = appendField(b, "segment_id")
	b = appendStr(b, r.SegmentID)
	b = appendField(b, "segment_name")
	b = appendStr(b, r.SegmentName)
	b = appendField(b, "addr")
	b = strconv.AppendUint(b, r.Addr, 10)
	b = appendField(b, "size")
	b = strconv.AppendUint(b, r.Size, 10)
	b = appendField(b, "status")
	b = strconv.AppendInt(b, int64(r.Status), 10)
	if r.Kind != "" {
		b = appendField(b, "kind")
		b = appendStr(b, r.Kind)
	}
	if r.Path != "" {
		b = appendField(b, "path")
		b = appendStr(b, r.Path)
	}
	if r.Offset != 0 {
		b = appendField(b, "offset")
		b = strconv.AppendInt(b, r.Offset, 10)
	}
	if r.Checksum != 0 {
		b = appendField(b, "checksum")
		b = strconv.AppendUint(b, uint64(r.Checksum), 10)
	}
	if r.Endpoint != "" {
		b = appendField(b, "endpoint")
		b = appendStr(b, r.Endpoint)
	}
	return append(b, '}')
}

func appendReplicas(b []byte, rs []Replica) []byte {
	b = append(b, '[')
	for i := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = rs[i].appendJSON(b)
	}
	return append(b, ']')
}

func (r *GetReplicaListResponse) appendJSON(b []byte) ([]byte, bool) {
	if r.Promote != nil {
		return b, false // rare: encoding/json
	}
	b = append(b, '{')
	b = r.Status.appendFields(b)
	b = appendField(b, "size")
	b = strconv.AppendUint(b, r.Size, 10)
	if len(r.Replicas) > 0 {
		b = appendField(b, "replicas")
		b = appendReplicas(b, r.Replicas)
	}
	b = appendField(b, "lease_ttl_ms")
	b = strconv.AppendInt(b, r.LeaseTTLMs, 10)
	if len(r.Value) > 0 {
		b = appendField(b, "value")
		b = appendBytes(b, r.Value)
	}
	return append(b, '}'), true
}

func (r *PutStartResponse) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, '{')
	b = r.Status.appendFields(b)
	if len(r.Replicas) > 0 {
		b = appendField(b, "replicas")
		b = appendReplicas(b, r.Replicas)
	}
	if r.Retry {
		b = appendField(b, "retry")
		b = append(b, "true"...)
	}
	return append(b, '}'), true
}

func (r *BatchResponse[T]) appendJSON(b []byte) ([]byte, bool) {
	start := len(b)
	b = append(b, '{')
	b = r.Status.appendFields(b)
	b = appendField(b, "results")
	if r.Results == nil {
		b = append(b, "null"...)
		return append(b, '}'), true
	}
	b = append(b, '[')
	for i := range r.Results {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = elemAppend(b, &r.Results[i]); !ok {
			return b[:start], false
		}
	}
	b = append(b, ']')
	return append(b, '}'), true
}

// ---- reading ----

// jdec reads the strict subset of JSON described above; ok turns false at the first thing
// outside it, and every later read returns zero values.
type jdec struct {
	b  []byte
	i  int
	ok bool
	// seen: strings read by shared, which a message repeats (a batch answer's segment ids and
	// names), each allocated once per message.
	seen []string
}

func (d *jdec) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte (0 at the end).
func (d *jdec) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *jdec) expect(c byte) {
	if d.ok && d.peek() == c {
		d.i++
		return
	}
	d.ok = false
}

func (d *jdec) str() string { return string(d.raw()) }

// raw reads a string and returns its bytes (nil when not ok): aliasing the message when the
// string holds no escape, else a copy with its escapes undone (unescape).
func (d *jdec) raw() []byte {
	if !d.ok || d.peek() != '"' {
		d.ok = false
		return nil
	}
	d.i++
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			b := d.b[start:d.i]
			d.i++
			return b
		case c == '\\':
			return d.unescape(start)
		case c < 0x20 || c >= 0x80:
			d.ok = false
			return nil
		}
		d.i++
	}
	d.ok = false
	return nil
}

// unescape reads the rest of a string that started at start and has an escape at d.i. Within
// the subset are the two-character escapes and \u escapes of ASCII characters (the store's
// reservation names hold 0x1f, which every writer sends as \u001f): each is one byte, the one
// encoding/json makes of it. A \u escape of anything else (its UTF-8, surrogate pairs and their
// replacement characters) is not.
func (d *jdec) unescape(start int) []byte {
	out := append(make([]byte, 0, d.i-start+16), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return out
		case c < 0x20 || c >= 0x80:
			d.ok = false
			return nil
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			break
		}
		n := 2
		switch e := d.b[d.i+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			v, ok := hex4(d.b[d.i+2:])
			if !ok || v >= 0x80 {
				d.ok = false
				return nil
			}
			out = append(out, byte(v))
			n = 6
		default:
			d.ok = false
			return nil
		}
		d.i += n
	}
	d.ok = false
	return nil
}

// hex4 reads the four hex digits that begin b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var v rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | rune(c)
	}
	return v, true
}

// shared reads a string that the message may repeat: the copy made at its first reading is
// returned again (the comparisons allocate nothing).
func (d *jdec) shared() string {
	b := d.raw()
	for _, s := range d.seen {
		if s == string(b) {
			return s
		}
	}
	s := string(b)
	if len(d.seen) < 8 {
		d.seen = append(d.seen, s)
	}
	return s
}

func (d *jdec) number() []byte {
	if !d.ok {
		return nil
	}
	d.ws()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	if d.i == start || (d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E')) {
		d.ok = false
		return nil
	}
	return d.b[start:d.i]
}

func (d *jdec) int(bits int) int64 {
	v, err := strconv.ParseInt(string(d.number()), 10, bits)
	if err != nil {
		d.ok = false
	}
	return v
}

func (d *jdec) uint(bits int) uint64 {
	v, err := strconv.ParseUint(string(d.number()), 10, bits)
	if err != nil {
		d.ok = false
	}
	return v
}

func (d *jdec) word(w string) bool {
	d.ws()
	if d.ok && len(d.b)-d.i >= len(w) && string(d.b[d.i:d.i+len(w)]) == w {
		d.i += len(w)
		return true
	}
	return false
}

func (d *jdec) bool() bool {
	switch {
	case d.word("true"):
		return true
	case d.word("false"):
		return false
	}
	d.ok = false
	return false
}

// null reads a null when one comes next.
func (d *jdec) null() bool { return d.peek() == 'n' && d.word("null") }

// object reads an object, calling field for each member name (field reads the value; it
// returns false for a name it does not know; it must not keep the name, which aliases the
// message).
func (d *jdec) object(field func(name string) bool) {
	d.expect('{')
	if d.ok && d.peek() == '}' {
		d.i++
		return
	}
	for d.ok {
		// The name aliases the message (no copy): field only compares it, never keeps it.
		b := d.raw()
		name := unsafe.String(unsafe.SliceData(b), len(b))
		d.expect(':')
		if !d.ok || !field(name) {
			d.ok = false
			return
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return
		default:
			d.ok = false
		}
	}
}

// array reads an array (null: none, and returns false), calling elem for each element.
func (d *jdec) array(elem func()) bool {
	if d.null() {
		return false
	}
	d.expect('[')
	if d.ok && d.peek() == ']' {
		d.i++
		return true
	}
	for d.ok {
		elem()
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return true
		default:
			d.ok = false
		}
	}
	return true
}

// end reports whether the message was read whole and within the subset.
func (d *jdec) end() bool {
	d.ws()
	return d.ok && d.i == len(d.b)
}

func (s *Status) field(d *jdec, name string) bool {
	switch name {
	case "code":
		s.Code = ErrorCode(d.int(32))
	case "message":
		s.Message = d.str()
	default:
		return false
	}
	return true
}

// bytes reads a []byte as encoding/json does: base64 in a string, or null.
func (d *jdec) bytes() []byte {
	if d.null() {
		return nil
	}
	if !d.ok || d.peek() != '"' {
		d.ok = false
		return nil
	}
	// The closing quote found at memchr speed; base64 then refuses every byte a plain string
	// may not hold (a backslash, a control or non-ASCII byte) but CR and LF, which it skips and
	// JSON forbids inside a string: those are refused here.
	end := bytes.IndexByte(d.b[d.i+1:], '"')
	if end < 0 {
		d.ok = false
		return nil
	}
	s := d.b[d.i+1 : d.i+1+end]
	if bytes.IndexByte(s, '\n') >= 0 || bytes.IndexByte(s, '\r') >= 0 {
		d.ok = false
		return nil
	}
	v := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(v, s)
	if err != nil {
		d.ok = false
		return nil
	}
	d.i += end + 2
	return v[:n]
}

func (d *jdec) strings() []string {
	out := []string{}
	if !d.array(func() { out = append(out, d.str()) }) {
		return nil
	}
	return out
}

func (r *KeyRequest) decode(d *jdec) {
	d.object(func(name string) bool {
		switch name {
		case "client_id":
			r.ClientID = d.str()
		case "key":
			r.Key = d.str()
		case "value":
			r.Value = d.bytes()
		case "reserved":
			r.Reserved = d.str()
		case "confirmed":
			r.Confirmed = d.strings()
		default:
			return false
		}
		return true
	})
}

func (r *BatchKeysRequest) decode(d *jdec) {
	d.object(func(name string) bool {
		switch name {
		case "client_id":
			r.ClientID = d.str()
		case "keys":
			r.Keys = d.strings()
		case "force":
			r.Force = d.bool()
		case "values":
			var vs [][]byte
			if d.array(func() { vs = append(vs, d.bytes()) }) && vs == nil {
				vs = [][]byte{}
			}
			r.Values = vs
		default:
			return false
		}
		return true
	})
}

func (s *Status) decode(d *jdec) {
	d.object(func(name string) bool { return s.field(d, name) })
}

func (r *ExistKeyResponse) decode(d *jdec) {
	d.object(func(name string) bool {
		switch name {
		case "exists":
			r.Exists = d.bool()
		case "size":
			r.Size = d.uint(64)
		default:
			return r.Status.field(d, name)
		}
		return true
	})
}

func (r *Replica) decode(d *jdec) {
	d.object(func(name string) bool {
		switch name {
		case "segment_id":
			r.SegmentID = d.shared()
		case "segment_name":
			r.SegmentName = d.shared()
		case "addr":
			r.Addr = d.uint(64)
		case "size":
			r.Size = d.uint(64)
		case "status":
			r.Status = ReplicaStatus(d.int(32))
		case "kind":
			r.Kind = d.shared()
		case "path":
			r.Path = d.str()
		case "offset":
			r.Offset = d.int(64)
		case "checksum":
			r.Checksum = uint32(d.uint(32))
		case "endpoint":
			r.Endpoint = d.shared()
		default:
			return false
		}
		return true
	})
}

func (d *jdec) replicas() []Replica {
	var out []Replica
	if !d.array(func() {
		out = append(out, Replica{})
		out[len(out)-1].decode(d)
	}) {
		return nil
	}
	if out == nil {
		out = []Replica{}
	}
	return out
}

func (r *GetReplicaListResponse) decode(d *jdec) {
	d.object(func(name string) bool {
		switch name {
		case "size":
			r.Size = d.uint(64)
		case "replicas":
			r.Replicas = d.replicas()
		case "lease_ttl_ms":
			r.LeaseTTLMs = d.int(64)
		case "value":
			r.Value = d.bytes()
		default:
			return r.Status.field(d, name) // "promote" and the rest: encoding/json
		}
		return true
	})
}

func (r *PutStartResponse) decode(d *jdec) {
	d.object(func(name string) bool {
		switch name {
		case "replicas":
			r.Replicas = d.replicas()
		case "retry":
			r.Retry = d.bool()
		default:
			return r.Status.field(d, name)
		}
		return true
	})
}

func (r *BatchResponse[T]) decodeJSON(data []byte) bool {
	var probe T
	if !elemDecode(&jdec{}, &probe) { // a reader that is not ok reads nothing
		return false
	}
	var t BatchResponse[T]
	d := jdec{b: data, ok: true}
	d.object(func(name string) bool {
		if name != "results" {
			return t.Status.field(&d, name)
		}
		res := []T{}
		if !d.array(func() {
			var zero T
			res = append(res, zero)
			elemDecode(&d, &res[len(res)-1])
		}) {
			res = nil
		}
		t.Results = res
		return true
	})
	if !d.end() {
		return false
	}
	*r = t
	return true
}
