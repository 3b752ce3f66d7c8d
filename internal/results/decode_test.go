package results

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/jsonscan"
	"github.com/tokentrace/tokentrace/internal/latency"
)

func TestFastDecoderMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	lines := [][]byte{
		benchLine(7, rng),
		[]byte(`{"v":1,"id":"a","chunk_ns":[],"chunk_tokens":null,"server":null,"error_kind":"timeout","unknown":{"x":[1,"2",{"y":null}],"z":true}}`),
		[]byte(`{"v":1,"ID":"case","Sent_NS":5}`),                       // other case: encoding/json matches it
		[]byte(`{"v":1,"id":"caf\u00e9","model":"mödel","sent_ns":-3}`), // escapes and UTF-8
		[]byte(`{"v":1,"sent_ns":1.5}`),                                 // not an integer: an error either way
		[]byte(`{"v":1,"chunk_tokens":[1,2,99999999999]}`),              // int32 overflow
		[]byte(`{"v":1,"id":"x"} trailing`),
		[]byte(`{"v":1,"id":"dup","chunk_ns":[1,2,3],"chunk_ns":[4]}`),
		[]byte(` { "v" : 1 , "stream" : false , "server" : { "queue_ns" : 1 , "source" : "vllm-metrics" } } `),
		[]byte(`{"v":01}`),
		[]byte(`{"v":1,"server":{"queue_ns":3},"server":{"prefill_ns":4}}`), // encoding/json merges into the same split
		[]byte(`{"v":1,"server":{"queue_ns":3},"server":null,"server":{"prefill_ns":4}}`),
		[]byte(`{"v":2,"server":{"prefill_ns":4,"decode_ns":5,"load_ns":334000000,"source":"ollama-durations","engine":"ollama","unreported":["queue"]}}`),
		[]byte(`{"v":1,"chunk_ns":[ 1 , -2 ,3 ,	4]}`),
		[]byte(`{"v":1,"chunk_ns":[1.5]}`),
		[]byte(`{"v":1,"chunk_ns":[01]}`),
		[]byte(`{"v":1,"chunk_ns":[1,2e3]}`),
		[]byte(`{"v":1,"chunk_ns":[1,]}`),
		[]byte(`{"v":1,"chunk_ns":[1 2]}`),
		[]byte(`{"v":1,"chunk_ns":[1234567890123456789]}`),
		[]byte(`{"v":1,"chunk_ns":[12`),
		[]byte(`[]`),
		[]byte(`{"v":2,"id":"t","max_tokens":64,"timing":[{"hop":"app","name":"retrieval","ns":3000},{"hop":"server","name":"prefill","ns":7}],"timing_notes":["a","b"]}`),
		[]byte(`{"v":2,"timing":[],"timing_notes":[]}`),
		[]byte(`{"v":2,"timing":null,"timing_notes":null}`),
		[]byte(`{"v":2,"timing":[null,{"hop":"a"}]}`),
		[]byte(`{"v":2,"timing":[{"hop":"a","ns":1}],"timing":[{"name":"x"}]}`), // encoding/json fills the first's element
		[]byte(`{"v":2,"timing":[{"hop":"a","ns":1}],"timing":null}`),
		[]byte(`{"v":2,"timing":[{"Hop":"a","ns":1.5}]}`),
		[]byte(`{"v":2,"timing":[{"hop":"a","extra":1}]}`),
		[]byte(`{"v":2,"timing":[{"hop":null}]}`),
		[]byte(`{"v":2,"timing_notes":["a"],"timing_notes":[null]}`),
		[]byte(`{"v":2,"timing_notes":["caf\u00e9 →"]}`),
		[]byte(`{"v":2,"timing":{"hop":"a"}}`),
		[]byte(`{"v":1,"input_tokens":4000,"cached_tokens":3584,"shared_prefix_tokens":3601}`),
		[]byte(`{"v":2,"input_tokens":1536,"prefix_blocks":[46,47,1000012],"prefix_block_tokens":512}`),
		[]byte(`{"v":2,"prefix_blocks":[1,2],"prefix_blocks":[3]}`),
		[]byte(`{"v":2,"prefix_blocks":[],"prefix_block_tokens":null}`),
		[]byte(`{"v":2,"prefix_blocks":[1.5]}`),
	}
	for _, line := range lines {
		var fast, std latency.Record
		errFast := DecodeRecord(line, &fast)
		errStd := json.Unmarshal(line, &std)
		if (errFast == nil) != (errStd == nil) {
			t.Errorf("%s: fast err %v, encoding/json err %v", line, errFast, errStd)
			continue
		}
		if errStd == nil {
			if diff := cmp.Diff(normalize(std), normalize(fast)); diff != "" {
				t.Errorf("%s (-encoding/json +fast):\n%s", line, diff)
			}
		}
	}
}

// normalize treats an empty slice and nil alike (the fast path reuses storage).
func normalize(r latency.Record) latency.Record {
	if len(r.ChunkNS) == 0 {
		r.ChunkNS = nil
	}
	if len(r.ChunkTokens) == 0 {
		r.ChunkTokens = nil
	}
	if len(r.OtherNS) == 0 {
		r.OtherNS = nil
	}
	if len(r.Timing) == 0 {
		r.Timing = nil
	}
	if len(r.TimingNotes) == 0 {
		r.TimingNotes = nil
	}
	if len(r.PrefixBlocks) == 0 {
		r.PrefixBlocks = nil
	}
	return r
}

func FuzzDecodeRecord(f *testing.F) {
	rng := rand.New(rand.NewPCG(6, 6))
	f.Add(benchLine(1, rng))
	f.Add([]byte(`{"v":1,"id":"a","chunk_ns":[1,-2],"server":{"queue_ns":3},"x":[{}]}`))
	f.Add([]byte(`{"V":2,"Id":"\u0041"}`))
	f.Add([]byte(`{"v":2,"timing":[{"hop":"app","name":"in","ns":5}],"timing_notes":["x"],"max_tokens":3}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var fast, std latency.Record
		errFast := DecodeRecord(line, &fast)
		errStd := json.Unmarshal(line, &std)
		if (errFast == nil) != (errStd == nil) {
			t.Fatalf("%q: fast err %v, encoding/json err %v", line, errFast, errStd)
		}
		if errStd == nil {
			if diff := cmp.Diff(normalize(std), normalize(fast)); diff != "" {
				t.Fatalf("%q (-encoding/json +fast):\n%s", line, diff)
			}
		}
	})
}

// Decoding a run of lines into one record (as the loader does) gives each
// line's own stages, never the previous line's.
func TestFastDecoderReusesTimingStorage(t *testing.T) {
	lines := []string{
		`{"v":2,"timing":[{"hop":"app","name":"in","ns":1},{"hop":"app","name":"upstream","ns":2},{"hop":"server","name":"prefill","ns":3}]}`,
		`{"v":2,"timing":[{"hop":"gateway","name":"gateway_in","ns":4}]}`,
		`{"v":2,"id":"none"}`,
		`{"v":2,"timing":[{"hop":"app","ns":5}],"timing_notes":["n"]}`,
	}
	var sc Decoder
	var r latency.Record
	for _, l := range lines {
		if err := sc.Decode([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		var want latency.Record
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(normalize(want), normalize(r)); diff != "" {
			t.Errorf("%s (-encoding/json +fast):\n%s", l, diff)
		}
	}
}

// benchLine is one requests.jsonl line as bench writes it: a streamed
// answer of one-token chunks with the server's split.
func benchLine(i int, rng *rand.Rand) []byte {
	n := 16 + rng.IntN(200)
	sent := int64(i)*10e6 + int64(rng.IntN(50000))
	first := sent + 20e6 + int64(rng.IntN(5e6))
	gap := int64(12e6 + rng.IntN(4e6))
	r := latency.Record{Schema: latency.RecordSchema, ID: fmt.Sprintf("req-%d", i), Model: "bench", Stream: true,
		IntendedNS: int64(i) * 10e6, SentNS: sent, WroteNS: sent + 80000, FirstByteNS: first - 1e6, FirstTokenNS: first,
		EndNS: first + int64(n-1)*gap + 300000, InputTokens: 100 + rng.IntN(3000), OutputTokens: n,
		InputSource: "usage", OutputSource: "usage", FinishReason: "stop", Status: 200,
		Server: &latency.ServerSplit{QueueNS: 2e6, PrefillNS: first - sent - 3e6, DecodeNS: int64(n-1) * gap, Source: "server-timing"}}
	for k := range n {
		r.ChunkNS = append(r.ChunkNS, first+int64(k)*gap)
	}
	b, err := json.Marshal(&r)
	if err != nil {
		panic(err)
	}
	return b
}

// slowByDesign are Record's keys the fast path hands to encoding/json on
// purpose (agent steps' tool spans: few records have them).
var slowByDesign = map[string]bool{"tools": true}

// Every field of Record (and of the structs it holds) is read by the fast
// path: a field added to the struct and not to fastDecoder.record fails
// here, instead of silently sending every record through encoding/json.
func TestFastDecoderReadsEveryField(t *testing.T) {
	var want latency.Record
	fill(reflect.ValueOf(&want).Elem(), slowByDesign)
	line, err := json.Marshal(&want)
	if err != nil {
		t.Fatal(err)
	}
	var got latency.Record
	d := fastDecoder{s: jsonscan.New(line), cache: &Decoder{}}
	if err := d.record(&got); err != nil {
		t.Fatalf("the fast path refused a record with every field set (%v): add the new field to fastDecoder.record\n%s", err, line)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fast path lost a field (-want +got):\n%s", diff)
	}
	for _, k := range jsonNames(reflect.TypeFor[latency.Record]()) {
		if !slowByDesign[k] && !strings.Contains(string(line), `"`+k+`":`) {
			t.Errorf("key %q not written by the filled record: fill does not reach it", k)
		}
	}
}

// fill sets every exported field of a struct value to a distinct non-zero
// value, skipping the JSON keys in skip.
func fill(v reflect.Value, skip map[string]bool) {
	n := int64(1)
	var set func(v reflect.Value)
	set = func(v reflect.Value) {
		n++
		switch v.Kind() {
		case reflect.String:
			v.SetString(fmt.Sprintf("s%d", n))
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int32, reflect.Int64:
			v.SetInt(n)
		case reflect.Slice:
			s := reflect.MakeSlice(v.Type(), 2, 2)
			set(s.Index(0))
			set(s.Index(1))
			v.Set(s)
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			set(v.Elem())
		case reflect.Struct:
			for i := range v.NumField() {
				f := v.Type().Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if f.IsExported() && !skip[name] {
					set(v.Field(i))
				}
			}
		default:
			panic("fill: unhandled kind " + v.Kind().String())
		}
	}
	set(v)
}

// BenchmarkDecodeRecord decodes requests.jsonl lines as bench writes them
// (streamed answers of 16–215 one-token chunks with the server's split).
func BenchmarkDecodeRecord(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 7))
	lines := make([][]byte, 64)
	size := 0
	for i := range lines {
		lines[i] = benchLine(i, rng)
		size += len(lines[i])
	}
	b.SetBytes(int64(size / len(lines)))
	b.ReportAllocs()
	var d Decoder
	var r latency.Record
	for i := 0; b.Loop(); i++ {
		if err := d.Decode(lines[i%len(lines)], &r); err != nil {
			b.Fatal(err)
		}
	}
}
