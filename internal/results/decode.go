package results

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"

	"github.com/tokentrace/tokentrace/internal/jsonscan"
	"github.com/tokentrace/tokentrace/internal/latency"
)

// DecodeRecord parses one requests.jsonl line into r, reusing r's slices
// and server split.
// A hand-written scanner handles the lines bench writes (about ten times
// faster than encoding/json on long chunk arrays); anything it is not sure
// of — escapes, non-ASCII text, fractions, a key in another case — goes to
// encoding/json, so the result is always what encoding/json would give.
func DecodeRecord(b []byte, r *latency.Record) error {
	var d Decoder
	return d.Decode(b, r)
}

// Decoder is DecodeRecord with a cache kept across calls (one per
// goroutine): it remembers the last value of each repetitive string field (model,
// sources, finish reason, phase, error kind) so that a run of records
// shares one string instead of allocating one per record, and interns the
// hop and stage names of Timing.
type Decoder struct {
	last  [8]string
	names map[string]string
}

const (
	scModel = iota
	scPhase
	scInputSource
	scOutputSource
	scFinish
	scErrorKind
	scServerSource
	scServerEngine
)

// Decode parses one line into r as DecodeRecord does.
func (sc *Decoder) Decode(b []byte, r *latency.Record) error {
	d := fastDecoder{s: jsonscan.New(b), cache: sc}
	if err := d.record(r); err == nil {
		return nil
	}
	*r = resetRecord(*r)
	return json.Unmarshal(b, r)
}

var errSlow = errors.New("not on the fast path")

// fastDecoder reads the common case of a record: anything the fast path is
// not sure of returns an error, and the line goes to encoding/json.
type fastDecoder struct {
	s     jsonscan.Scanner
	cache *Decoder
}

// plain returns a string's raw bytes if it has no escapes and only ASCII
// bytes (so it is its own value and, as a key, matches only by ASCII case
// folding), else errSlow.
func plain(t jsonscan.Str, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	if t.Escaped || t.NonASCII {
		return nil, errSlow
	}
	return t.Raw, nil
}

func (d *fastDecoder) str() (string, error) {
	b, err := plain(d.s.String())
	return string(b), err
}

// strc reads a string like str, reusing the cached value of a slot when equal.
func (d *fastDecoder) strc(slot int) (string, error) {
	k, err := plain(d.s.String())
	if err != nil {
		return "", err
	}
	if string(k) == d.cache.last[slot] {
		return d.cache.last[slot], nil
	}
	d.cache.last[slot] = string(k)
	return d.cache.last[slot], nil
}

// name reads a string like str, interned: hop and stage names repeat on
// every record.
func (d *fastDecoder) name() (string, error) {
	k, err := plain(d.s.String())
	if err != nil {
		return "", err
	}
	if v, ok := d.cache.names[string(k)]; ok {
		return v, nil
	}
	if d.cache.names == nil {
		d.cache.names = map[string]string{}
	}
	if len(d.cache.names) >= 1024 { // a bound against records full of distinct names
		return string(k), nil
	}
	v := string(k)
	d.cache.names[v] = v
	return v, nil
}

// timing reads a Timing array into dst's storage.
func (d *fastDecoder) timing(dst []latency.HopStage) ([]latency.HopStage, error) {
	if d.s.Null() {
		return nil, nil
	}
	dst = dst[:0]
	err := d.s.Array(func(int) error {
		if d.s.Null() { // encoding/json leaves a null element as the zero value
			dst = append(dst, latency.HopStage{})
			return nil
		}
		var st latency.HopStage
		err := d.object(func(k []byte) error {
			if d.s.Null() {
				return errSlow
			}
			var err error
			switch string(k) {
			case "hop":
				var h string
				h, err = d.name()
				st.Hop = latency.Hop(h)
			case "name":
				st.Name, err = d.name()
			case "ns":
				st.NS, err = d.int64()
			default:
				return errSlow
			}
			return err
		})
		dst = append(dst, st)
		return err
	})
	if dst == nil {
		dst = []latency.HopStage{}
	}
	return dst, err
}

// strs reads an array of strings.
func (d *fastDecoder) strs() ([]string, error) {
	if d.s.Null() {
		return nil, nil
	}
	out := []string{}
	err := d.s.Array(func(int) error {
		v, err := d.str()
		out = append(out, v)
		return err
	})
	return out, err
}

func (d *fastDecoder) int64() (int64, error) { return d.s.Int64() }

func (d *fastDecoder) int() (int, error) {
	v, err := d.s.Int64()
	return int(v), err
}

func (d *fastDecoder) int64s(dst []int64) ([]int64, error) {
	if d.s.Null() {
		return nil, nil
	}
	return jsonscan.AppendInts(&d.s, dst[:0])
}

func (d *fastDecoder) int32s(dst []int32) ([]int32, error) {
	if d.s.Null() {
		return nil, nil
	}
	return jsonscan.AppendInts(&d.s, dst[:0])
}

// object walks an object's members, calling field for each (plain) key.
func (d *fastDecoder) object(field func(k []byte) error) error {
	return d.s.Object(func(k jsonscan.Str) error {
		key, err := plain(k, nil)
		if err != nil {
			return err
		}
		return field(key)
	})
}

// recordKeys are the JSON names of latency.Record, read from its tags: a
// key matching one of them only without regard to case goes to
// encoding/json, which matches so. TestFastDecoderReadsEveryField holds the
// switch in record to the same tags.
var recordKeys = jsonNames(reflect.TypeFor[latency.Record]())

// jsonNames lists the JSON names of a struct type's exported fields.
func jsonNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

func (d *fastDecoder) record(r *latency.Record) error {
	spare := r.Server // the previous record's split, reused for this one's
	spareTiming := r.Timing[:0]
	seenTiming, seenNotes := false, false
	*r = resetRecord(*r)
	err := d.object(func(k []byte) error {
		var err error
		if d.s.Null() {
			return d.nullField(r, k)
		}
		for _, group := range [...]func(*latency.Record, []byte) (bool, error){d.instant, d.count, d.ident, d.outcome} {
			if ok, err := group(r, k); ok {
				return err
			}
		}
		switch string(k) {
		case "timing":
			if seenTiming { // encoding/json would decode into the first's elements
				return errSlow
			}
			seenTiming = true
			if r.Timing == nil {
				r.Timing, spareTiming = spareTiming, nil
			}
			r.Timing, err = d.timing(r.Timing)
		case "timing_notes":
			if seenNotes {
				return errSlow
			}
			seenNotes = true
			r.TimingNotes, err = d.strs()
		case "server":
			// Like encoding/json, a repeated "server" fills the same split.
			if r.Server == nil {
				if spare == nil {
					spare = &latency.ServerSplit{}
				}
				*spare = latency.ServerSplit{}
				r.Server, spare = spare, nil
			}
			err = d.server(r.Server)
		default:
			for _, name := range recordKeys {
				if strings.EqualFold(name, string(k)) {
					return errSlow
				}
			}
			d.s.MaxDepth = 64
			return d.s.Skip()
		}
		return err
	})
	if err != nil {
		return err
	}
	return d.s.End()
}

// ident reads the keys that say which request a record is: its ids, model,
// stream flag, phase, session and agent step, trace and the gateway's total.
// ok is false for a key of another group.
func (d *fastDecoder) ident(r *latency.Record, k []byte) (ok bool, err error) {
	switch string(k) {
	case "v":
		r.Schema, err = d.int()
	case "id":
		r.ID, err = d.str()
	case "seq":
		r.Seq, err = d.int64()
	case "server_id":
		r.ServerID, err = d.str()
	case "model":
		r.Model, err = d.strc(scModel)
	case "stream":
		r.Stream, err = d.s.Bool()
	case "warmup":
		r.Warmup, err = d.s.Bool()
	case "phase":
		r.Phase, err = d.strc(scPhase)
	case "session":
		r.Session, err = d.int64()
	case "turn":
		r.Turn, err = d.int()
	case "steps":
		r.Steps, err = d.int()
	case "tools_parallel":
		r.ToolsParallel, err = d.s.Bool()
	case "tools":
		return true, errSlow // agent steps: few, read by encoding/json
	case "gateway_ns":
		r.GatewayNS, err = d.int64()
	case "trace_id":
		r.TraceID, err = d.str()
	default:
		return false, nil
	}
	return true, err
}

// instant reads the keys of the request's instants, chunk arrivals included.
// ok is false for a key of another group.
func (d *fastDecoder) instant(r *latency.Record, k []byte) (ok bool, err error) {
	switch string(k) {
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
	default:
		return false, nil
	}
	return true, err
}

// count reads the keys of the request's token counts and prefix blocks.
// ok is false for a key of another group.
func (d *fastDecoder) count(r *latency.Record, k []byte) (ok bool, err error) {
	switch string(k) {
	case "input_tokens":
		r.InputTokens, err = d.int()
	case "input_tokens_requested":
		r.InputTokensRequested, err = d.int()
	case "output_tokens":
		r.OutputTokens, err = d.int()
	case "reasoning_tokens":
		r.ReasoningTokens, err = d.int()
	case "cached_tokens":
		r.CachedTokens, err = d.int()
	case "shared_prefix_tokens":
		r.SharedPrefixTokens, err = d.int()
	case "prefix_blocks":
		r.PrefixBlocks, err = d.int64s(r.PrefixBlocks)
	case "prefix_block_tokens":
		r.PrefixBlockTokens, err = d.int()
	case "max_tokens":
		r.MaxTokens, err = d.int()
	default:
		return false, nil
	}
	return true, err
}

// outcome reads the keys of how the request ended: its counts' sources,
// finish reason, status, resends and error.
// ok is false for a key of another group.
func (d *fastDecoder) outcome(r *latency.Record, k []byte) (ok bool, err error) {
	switch string(k) {
	case "input_source":
		r.InputSource, err = d.strc(scInputSource)
	case "output_source":
		r.OutputSource, err = d.strc(scOutputSource)
	case "finish_reason":
		r.FinishReason, err = d.strc(scFinish)
	case "status":
		r.Status, err = d.int()
	case "resent":
		r.Resent, err = d.int()
	case "error_kind":
		var k string
		k, err = d.strc(scErrorKind)
		r.ErrorKind = latency.ErrorKind(k)
	case "error":
		r.Error, err = d.str()
	default:
		return false, nil
	}
	return true, err
}

// server reads the server's split into s.
func (d *fastDecoder) server(s *latency.ServerSplit) error {
	return d.object(func(k []byte) error {
		var err error
		switch string(k) {
		case "queue_ns":
			s.QueueNS, err = d.int64()
		case "prefill_ns":
			s.PrefillNS, err = d.int64()
		case "decode_ns":
			s.DecodeNS, err = d.int64()
		case "load_ns":
			s.LoadNS, err = d.int64()
		case "kv_transfer_ns":
			s.KVTransferNS, err = d.int64()
		case "source":
			s.Source, err = d.strc(scServerSource)
		case "engine":
			s.Engine, err = d.strc(scServerEngine)
		case "unreported":
			s.Unreported, err = d.strs()
		case "derived":
			s.Derived, err = d.strs()
		case "first_scheduled_unix_ns":
			s.FirstScheduledUnixNS, err = d.int64()
		default:
			return errSlow
		}
		return err
	})
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
	case "prefix_blocks":
		r.PrefixBlocks = nil
	case "server":
		r.Server = nil
	case "timing", "timing_notes":
		return errSlow // encoding/json's result depends on what came before
	}
	return nil
}

// resetRecord clears a record for reuse, keeping its slices' storage.
func resetRecord(r latency.Record) latency.Record {
	return latency.Record{ChunkNS: r.ChunkNS[:0], ChunkTokens: r.ChunkTokens[:0], OtherNS: r.OtherNS[:0]}
}
