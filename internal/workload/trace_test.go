package workload

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

func readRows(t *testing.T, in string, f TraceFilter) *Trace {
	t.Helper()
	got, err := ReadTrace(strings.NewReader(in), f)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestReadAzureTrace(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:15:46.6805900,374,44\n" +
		"2023-11-16 18:15:50.9951690,396,109\r\n" +
		"\n" +
		"2023-11-16 18:15:50.9951690,1,0\n"
	got := readRows(t, in, TraceFilter{})
	want := &Trace{Format: TraceAzure, Rows: []TraceRow{
		{At: 0, Input: 374, Output: 44},
		{At: 4*time.Second + 314579*time.Microsecond, Input: 396, Output: 109},
		{At: 4*time.Second + 314579*time.Microsecond, Input: 1},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// The 2024 Azure traces span days and stamp a zone offset; a window a
// day in selects that day's rows.
func TestReadAzure2024TraceAndWindow(t *testing.T) {
	in := "\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2024-05-10 00:00:00.009930+00:00,2162,5\n" +
		"2024-05-11 00:00:01.5+00:00,100,7\n" +
		"2024-05-11 00:00:02.5+00:00,200,8\n" +
		"2024-05-12 00:00:00+00:00,300,9\n"
	got := readRows(t, in, TraceFilter{})
	if got.Format != TraceAzure || len(got.Rows) != 4 || got.Rows[3].At != 48*time.Hour-9930*time.Microsecond {
		t.Fatalf("got %+v", got)
	}
	w, err := ParseWindow("24h+1h")
	if err != nil {
		t.Fatal(err)
	}
	rp, err := NewReplay(got.Rows, ReplayConfig{Window: w, Chat: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rp.Len() != 2 {
		t.Errorf("window 24h+1h kept %d rows, want 2", rp.Len())
	}
	if _, err := NewReplay(got.Rows, ReplayConfig{Window: Window{Start: 72 * time.Hour, End: 73 * time.Hour}}); err == nil ||
		!strings.Contains(err.Error(), "the trace spans 0s-47h59m59") {
		t.Errorf("a window past the trace: error %v, want the trace's span", err)
	}
}

func TestReadBurstGPTTrace(t *testing.T) {
	in := "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" +
		"5,ChatGPT,472,18,490,Conversation log\n" +
		"45,GPT-4,1087,0,1087,API log\n" +
		"118,ChatGPT,417,276,693,\"Conversation log\"\n" +
		"118.5,chatgpt,10,2,12,API log\n"
	got := readRows(t, in, TraceFilter{Model: "ChatGPT"})
	want := &Trace{Format: TraceBurstGPT, Skipped: 1, Rows: []TraceRow{
		{At: 0, Input: 472, Output: 18},
		{At: 113 * time.Second, Input: 417, Output: 276},
		{At: 113*time.Second + 500*time.Millisecond, Input: 10, Output: 2},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if all := readRows(t, in, TraceFilter{}); len(all.Rows) != 4 || all.Rows[1].At != 40*time.Second {
		t.Errorf("unfiltered: %+v", all)
	}
}

func TestReadMooncakeTrace(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}
{"timestamp": 1500, "input_length": 100, "output_length": 1, "hash_ids": [46], "extra": true}

{"timestamp": 1500.5, "input_length": 7, "output_length": 0}
`
	got := readRows(t, in, TraceFilter{})
	want := &Trace{Format: TraceMooncake, Rows: []TraceRow{
		{At: 0, Input: 6955, Output: 52, HashIDs: []int64{46, 47, 48}},
		{At: 1500 * time.Millisecond, Input: 100, Output: 1, HashIDs: []int64{46}},
		{At: 1500*time.Millisecond + 500*time.Microsecond, Input: 7},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestReadTraceErrors(t *testing.T) {
	for _, c := range []struct {
		in    string
		model string
		want  string
	}{
		{"", "", "no rows; want an Azure LLM inference CSV (columns TIMESTAMP,ContextTokens,GeneratedTokens), a BurstGPT CSV"},
		{"a,b,c\n", "", `line 1: header "a,b,c" is not a trace's: want an Azure`},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n", "", "trace has no rows"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\nx,1,2\n", "", "line 2: timestamp"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n1,-1,2\n", "", "ContextTokens: -1 is negative"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n1,1\n", "", "line 2: 2 fields, want at least 3"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n5,1,1\n4,1,1\n", "", "line 3: 4: timestamp is before the previous"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n5,1,1\n", "GPT-4", "an Azure trace has no model column"},
		{"Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,x,1\n", "", "line 2: Request tokens"},
		{"Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,1,1\n", "GPT-4", `no row of the trace's 1 is of model "GPT-4"`},
		{`{"timestamp": 1, "input_length": 2}`, "", `line 1: no key "output_length"`},
		{`{"Timestamp": 1, "input_length": 2, "output_length": 3}`, "", `line 1: no key "timestamp"`},
		{`{"timestamp": -1, "input_length": 2, "output_length": 3}`, "", "timestamp -1: want milliseconds"},
		{`{"timestamp": 1, "input_length": 2.5, "output_length": 3}`, "", "input_length 2.5: want a whole number"},
		{`{"timestamp": 1, "input_length": 2, "output_length": 3, "hash_ids": ["a"]}`, "", "hash_ids: want an array"},
		{"{\"timestamp\": 9, \"input_length\": 2, \"output_length\": 3}\n{\"timestamp\": 1, \"input_length\": 2, \"output_length\": 3}", "", "line 2: timestamp is before"},
		{`{"timestamp": 1, "input_length": 2, "output_length": 3}`, "x", "a Mooncake trace has no model column"},
		{"{not json", "", "line 1: not a JSON object"},
	} {
		_, err := ReadTrace(strings.NewReader(c.in), TraceFilter{Model: c.model})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadTrace(%q, %q) error = %v, want %q", c.in, c.model, err, c.want)
		}
	}
}

// A Mooncake replay's prompts share exactly the tokens their hash_ids say,
// and SharedPrefixTokens counts the leading blocks an earlier row began
// with (a chain of ids, not ids alone).
func TestReplayHashBlocks(t *testing.T) {
	rows := []TraceRow{
		{Input: 40, Output: 1, HashIDs: []int64{1, 2, 3, 4}},
		{Input: 35, Output: 1, HashIDs: []int64{1, 2, 9, 10}},
		{Input: 40, Output: 1, HashIDs: []int64{7, 2, 3, 4}}, // block 2 after another block: not shared
		{Input: 25, Output: 1, HashIDs: []int64{1, 2, 3}},
		{Input: 10, Output: 1},
	}
	for _, chat := range []bool{true, false} {
		rp, err := NewReplay(rows, ReplayConfig{Chat: chat, Seed: 3, BlockSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		role := 0
		if chat {
			role = 1
		}
		wantShared := []int{0, role + 20, 0, 25, 0} // row 3 is all a prefix of row 0
		var toks [][]int32
		for i := range rows {
			q, _ := rp.Session(int64(i)).Next(0)
			if q.InputTokens != rows[i].Input || q.SharedPrefixTokens != wantShared[i] || rp.SharedPrefixTokens(int64(i)) != wantShared[i] {
				t.Errorf("chat %v row %d: %d tokens, %d shared; want %d, %d", chat, i, q.InputTokens, q.SharedPrefixTokens, rows[i].Input, wantShared[i])
			}
			if chat {
				toks = append(toks, tokenizer.EncodeChat(nil, q.Messages))
			} else {
				toks = append(toks, tokenizer.Encode(nil, q.Prompt))
			}
		}
		common := func(a, b []int32) int {
			n := 0
			for n < min(len(a), len(b)) && a[n] == b[n] {
				n++
			}
			return n
		}
		// Equal blocks are equal tokens; filler of distinct seeds may share a
		// chance word or two.
		if n := common(toks[0], toks[1]); n < role+20 || n > role+23 {
			t.Errorf("chat %v: rows 0 and 1 share %d tokens, want %d", chat, n, role+20)
		}
		if n := common(toks[0], toks[3]); n != 25 {
			t.Errorf("chat %v: rows 0 and 3 share %d tokens, want all 25 of row 3", chat, n)
		}
		if !slices.Equal(toks[0][role+10:], toks[2][role+10:]) {
			t.Errorf("chat %v: blocks 2-4 of rows 0 and 2 differ", chat)
		}
		if !rp.SharesPrefixes() {
			t.Errorf("chat %v: SharesPrefixes false", chat)
		}
	}
	plain, err := NewReplay(rows[4:], ReplayConfig{})
	if err != nil || plain.SharesPrefixes() {
		t.Errorf("rows without hash_ids: SharesPrefixes %v, %v", plain.SharesPrefixes(), err)
	}
}

// TestSharedTraces reads the real traces in ../shared when they are there.
func TestSharedTraces(t *testing.T) {
	for name, rows := range map[string]int{"conv.csv": 19366, "code.csv": 8819} {
		path := filepath.Join("..", "..", "..", "shared", "data", "azure-llm-2023", name)
		if _, err := os.Stat(path); err != nil {
			t.Skipf("shared trace data not present (%v)", err)
		}
		trace, err := ReadTraceFile(path, TraceFilter{})
		if err != nil {
			t.Fatal(err)
		}
		got := trace.Rows
		if len(got) != rows {
			t.Errorf("%s: %d rows, want %d", name, len(got), rows)
		}
		if last := got[len(got)-1].At; last < 50*time.Minute || last > 70*time.Minute {
			t.Errorf("%s spans %s, want about an hour", name, last)
		}
	}
}

func FuzzReadTrace(f *testing.F) {
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n", "")
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n1.5,1,2\n2,3,4\n", "")
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,2162,5\n", "")
	f.Add("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n", "ChatGPT")
	f.Add(`{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}`+"\n", "")
	f.Fuzz(func(t *testing.T, s, model string) {
		tr, err := ReadTrace(strings.NewReader(s), TraceFilter{Model: model})
		if err != nil {
			return
		}
		rows := tr.Rows
		if len(rows) == 0 {
			t.Fatal("no rows and no error")
		}
		for i, r := range rows {
			if r.Input < 0 || r.Output < 0 || r.At < 0 || (i > 0 && r.At < rows[i-1].At) {
				t.Fatalf("bad row %d: %+v", i, r)
			}
		}
		rp, err := NewReplay(rows, ReplayConfig{Chat: true, BlockSize: 7})
		if err != nil {
			t.Fatal(err)
		}
		for i := range min(rp.Len(), 8) {
			if rows[i].Input > 4096 {
				continue
			}
			q, _ := rp.Session(int64(i)).Next(0)
			if in, _ := rp.Lengths(int64(i)); q.InputTokens != in || q.SharedPrefixTokens > in {
				t.Fatalf("row %d: %d tokens, Lengths %d, shared %d", i, q.InputTokens, in, q.SharedPrefixTokens)
			}
		}
	})
}
