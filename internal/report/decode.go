package report

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// decodeRecord parses one requests.jsonl line into r, reusing r's slices.
// A hand-written scanner handles the lines bench writes (about ten times
// faster than encoding/json on long chunk arrays); anything it is not sure
// of — escapes, non-ASCII text, fractions, a key in another case — goes to
// encoding/json, so the result is always what encoding/json would give.
func decodeRecord(b []byte, r *latency.Record) error {
	var sc strCache
	return sc.decode(b, r)
}

// strCache remembers the last value of each repetitive string field (model,
// sources, finish reason, phase, error kind) so that a run of records
// shares one string instead of allocating one per record.
type strCache [8]string

const (
	scModel = iota
	scPhase
	scInputSource
	scOutputSource
	scFinish
	scErrorKind
	scServerSource
)

// decode is decodeRecord with a cache kept across calls (one per goroutine).
func (sc *strCache) decode(b []byte, r *latency.Record) error {
	d := fastDecoder{b: b, cache: sc}
	if err := d.record(r); err == nil {
		return nil
	}
	*r = resetRecord(*r)
	return json.Unmarshal(b, r)
}

var errSlow = errors.New("not on the fast path")

type fastDecoder struct {
	b     []byte
	i     int
	cache *strCache
}

func (d *fastDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *fastDecoder) expect(c byte) error {
	d.ws()
	if d.i >= len(d.b) || d.b[d.i] != c {
		return errSlow
	}
	d.i++
	return nil
}

// str reads a string with no escapes and only ASCII bytes.
func (d *fastDecoder) str() (string, error) {
	if err := d.expect('"'); err != nil {
		return "", err
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := string(d.b[start:d.i])
			d.i++
			return s, nil
		case c == '\\' || c >= 0x80 || c < 0x20:
			return "", errSlow
		}
		d.i++
	}
	return "", errSlow
}

// strc reads a string like str, reusing the cached value of a slot when equal.
func (d *fastDecoder) strc(slot int) (string, error) {
	k, err := d.key() // same rules as a key: no escapes, ASCII only
	if err != nil {
		return "", err
	}
	if string(k) == d.cache[slot] {
		return d.cache[slot], nil
	}
	d.cache[slot] = string(k)
	return d.cache[slot], nil
}

// key reads an object key as bytes (no copy).
func (d *fastDecoder) key() ([]byte, error) {
	if err := d.expect('"'); err != nil {
		return nil, err
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c == '"' {
			k := d.b[start:d.i]
			d.i++
			return k, nil
		}
		if c == '\\' || c >= 0x80 || c < 0x20 {
			return nil, errSlow
		}
		d.i++
	}
	return nil, errSlow
}

// isNull consumes a null literal if one is next.
func (d *fastDecoder) isNull() bool {
	d.ws()
	if len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// int64 reads an integer; fractions, exponents and numbers of more than 18
// digits are left to encoding/json.
func (d *fastDecoder) int64() (int64, error) {
	d.ws()
	b, i := d.b, d.i
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	start := i
	var v int64
	for i < len(b) {
		c := b[i] - '0'
		if c > 9 {
			break
		}
		v = v*10 + int64(c)
		i++
	}
	n := i - start
	if n == 0 || n > 18 || (n > 1 && b[start] == '0') {
		return 0, errSlow
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, errSlow
	}
	d.i = i
	if neg {
		return -v, nil
	}
	return v, nil
}

func (d *fastDecoder) int32() (int32, error) {
	v, err := d.int64()
	if err != nil || v != int64(int32(v)) {
		return 0, errSlow
	}
	return int32(v), nil
}

func (d *fastDecoder) bool() (bool, error) {
	d.ws()
	switch {
	case len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "true":
		d.i += 4
		return true, nil
	case len(d.b)-d.i >= 5 && string(d.b[d.i:d.i+5]) == "false":
		d.i += 5
		return false, nil
	}
	return false, errSlow
}

func (d *fastDecoder) int64s(dst []int64) ([]int64, error) {
	dst = dst[:0]
	if d.isNull() {
		return nil, nil
	}
	if err := d.expect('['); err != nil {
		return nil, err
	}
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return dst, nil
	}
	b, i := d.b, d.i
	for {
		// The common case inline: non-negative integers, "," or "]" right after.
		start := i
		var v int64
		for i < len(b) {
			c := b[i] - '0'
			if c > 9 {
				break
			}
			v = v*10 + int64(c)
			i++
		}
		n := i - start
		if n == 0 || n > 18 || (n > 1 && b[start] == '0') || i >= len(b) {
			// Anything else (a sign, spaces, a fraction): the general path.
			d.i = start
			var err error
			if v, err = d.int64(); err != nil {
				return nil, err
			}
			d.ws()
			i = d.i
			if i >= len(b) {
				return nil, errSlow
			}
		}
		dst = append(dst, v)
		c := b[i]
		i++
		switch c {
		case ',':
			continue
		case ']':
			d.i = i
			return dst, nil
		case '.', 'e', 'E':
			return nil, errSlow
		case ' ', '\t', '\n', '\r':
			d.i = i
			d.ws()
			i = d.i
			if i >= len(b) {
				return nil, errSlow
			}
			c = b[i]
			i++
			if c == ']' {
				d.i = i
				return dst, nil
			}
			if c != ',' {
				return nil, errSlow
			}
			// the next element may begin with spaces: let the general path skip them
			d.i = i
			d.ws()
			i = d.i
		default:
			return nil, errSlow
		}
	}
}

func (d *fastDecoder) int32s(dst []int32) ([]int32, error) {
	dst = dst[:0]
	if d.isNull() {
		return nil, nil
	}
	if err := d.expect('['); err != nil {
		return nil, err
	}
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return dst, nil
	}
	for {
		v, err := d.int32()
		if err != nil {
			return nil, err
		}
		dst = append(dst, v)
		d.ws()
		if d.i >= len(d.b) {
			return nil, errSlow
		}
		c := d.b[d.i]
		d.i++
		if c == ']' {
			return dst, nil
		}
		if c != ',' {
			return nil, errSlow
		}
	}
}

// object walks an object's members, calling field for each key.
func (d *fastDecoder) object(field func(k []byte) error) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return nil
	}
	for {
		k, err := d.key()
		if err != nil {
			return err
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := field(k); err != nil {
			return err
		}
		d.ws()
		if d.i >= len(d.b) {
			return errSlow
		}
		c := d.b[d.i]
		d.i++
		if c == '}' {
			return nil
		}
		if c != ',' {
			return errSlow
		}
	}
}

// recordKeys are the JSON names of latency.Record; a key matching one of
// them only without regard to case goes to encoding/json, which matches so.
var recordKeys = []string{"v", "id", "server_id", "model", "stream", "warmup", "phase", "session", "turn",
	"intended_ns", "sent_ns", "connect_ns", "wrote_ns", "first_byte_ns", "first_reason_ns", "first_token_ns",
	"end_ns", "chunk_ns", "chunk_tokens", "other_ns", "last_event_ns", "input_tokens", "output_tokens",
	"reasoning_tokens", "cached_tokens", "input_source", "output_source", "finish_reason", "status",
	"error_kind", "error", "server", "gateway_ns", "trace_id"}

func (d *fastDecoder) record(r *latency.Record) error {
	*r = resetRecord(*r)
	err := d.object(func(k []byte) error {
		var err error
		if d.isNull() {
			return d.nullField(r, k)
		}
		switch string(k) {
		case "v":
			var v int64
			v, err = d.int64()
			r.Schema = int(v)
		case "id":
			r.ID, err = d.str()
		case "server_id":
			r.ServerID, err = d.str()
		case "model":
			r.Model, err = d.strc(scModel)
		case "stream":
			r.Stream, err = d.bool()
		case "warmup":
			r.Warmup, err = d.bool()
		case "phase":
			r.Phase, err = d.strc(scPhase)
		case "session":
			r.Session, err = d.int64()
		case "turn":
			var v int64
			v, err = d.int64()
			r.Turn = int(v)
		case "intended_ns":
			r.IntendedNS, err = d.int64()
		case "sent_ns":
			r.SentNS, err = d.int64()
		case "connect_ns":
			r.ConnectNS, err = d.int64()
		case "wrote_ns":
			r.WroteNS, err = d.int64()
		case "first_byte_ns":
			r.FirstByteNS, err = d.int64()
		case "first_reason_ns":
			r.FirstReasonNS, err = d.int64()
		case "first_token_ns":
			r.FirstTokenNS, err = d.int64()
		case "end_ns":
			r.EndNS, err = d.int64()
		case "chunk_ns":
			r.ChunkNS, err = d.int64s(r.ChunkNS)
		case "chunk_tokens":
			r.ChunkTokens, err = d.int32s(r.ChunkTokens)
		case "other_ns":
			r.OtherNS, err = d.int64s(r.OtherNS)
		case "last_event_ns":
			r.LastEventNS, err = d.int64()
		case "input_tokens":
			var v int64
			v, err = d.int64()
			r.InputTokens = int(v)
		case "output_tokens":
			var v int64
			v, err = d.int64()
			r.OutputTokens = int(v)
		case "reasoning_tokens":
			var v int64
			v, err = d.int64()
			r.ReasoningTokens = int(v)
		case "cached_tokens":
			var v int64
			v, err = d.int64()
			r.CachedTokens = int(v)
		case "input_source":
			r.InputSource, err = d.strc(scInputSource)
		case "output_source":
			r.OutputSource, err = d.strc(scOutputSource)
		case "finish_reason":
			r.FinishReason, err = d.strc(scFinish)
		case "status":
			var v int64
			v, err = d.int64()
			r.Status = int(v)
		case "error_kind":
			r.ErrorKind, err = d.strc(scErrorKind)
		case "error":
			r.Error, err = d.str()
		case "gateway_ns":
			r.GatewayNS, err = d.int64()
		case "trace_id":
			r.TraceID, err = d.str()
		case "server":
			s := &latency.ServerSplit{}
			err = d.object(func(k []byte) error {
				var err error
				switch string(k) {
				case "queue_ns":
					s.QueueNS, err = d.int64()
				case "prefill_ns":
					s.PrefillNS, err = d.int64()
				case "decode_ns":
					s.DecodeNS, err = d.int64()
				case "source":
					s.Source, err = d.strc(scServerSource)
				default:
					return errSlow
				}
				return err
			})
			r.Server = s
		default:
			for _, name := range recordKeys {
				if strings.EqualFold(name, string(k)) {
					return errSlow
				}
			}
			return d.skip(0)
		}
		return err
	})
	if err != nil {
		return err
	}
	d.ws()
	if d.i != len(d.b) {
		return errSlow
	}
	return nil
}

// nullField handles "key": null, which leaves a field as it is except for
// slices and pointers, which encoding/json sets to nil.
func (d *fastDecoder) nullField(r *latency.Record, k []byte) error {
	switch string(k) {
	case "chunk_ns":
		r.ChunkNS = nil
	case "chunk_tokens":
		r.ChunkTokens = nil
	case "other_ns":
		r.OtherNS = nil
	case "server":
		r.Server = nil
	}
	return nil
}

// skip passes over one value of any kind (an unknown field).
func (d *fastDecoder) skip(depth int) error {
	if depth > 64 {
		return errSlow
	}
	d.ws()
	if d.i >= len(d.b) {
		return errSlow
	}
	switch c := d.b[d.i]; {
	case c == '"':
		_, err := d.str()
		return err
	case c == '{':
		return d.object(func([]byte) error { return d.skip(depth + 1) })
	case c == '[':
		d.i++
		d.ws()
		if d.i < len(d.b) && d.b[d.i] == ']' {
			d.i++
			return nil
		}
		for {
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			d.ws()
			if d.i >= len(d.b) {
				return errSlow
			}
			c := d.b[d.i]
			d.i++
			if c == ']' {
				return nil
			}
			if c != ',' {
				return errSlow
			}
		}
	case c == 't' || c == 'f':
		_, err := d.bool()
		return err
	case c == 'n':
		if d.isNull() {
			return nil
		}
		return errSlow
	default:
		_, err := d.int64()
		return err
	}
}
