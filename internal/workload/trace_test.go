package workload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestReadAzureTrace(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:15:46.6805900,374,44\n" +
		"2023-11-16 18:15:50.9951690,396,109\r\n" +
		"\n" +
		"2023-11-16 18:15:50.9951690,1,0\n"
	got, err := ReadAzureTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []TraceRow{
		{0, 374, 44},
		{4*time.Second + 314579*time.Microsecond, 396, 109},
		{4*time.Second + 314579*time.Microsecond, 1, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestReadAzureTraceErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":        "no rows",
		"a,b,c\n": "lacks the column TIMESTAMP",
		"TIMESTAMP,ContextTokens,GeneratedTokens\nx,1,2\n":        "line 2: timestamp",
		"TIMESTAMP,ContextTokens,GeneratedTokens\n1,-1,2\n":       "negative",
		"TIMESTAMP,ContextTokens,GeneratedTokens\n1,1\n":          "fields",
		"TIMESTAMP,ContextTokens,GeneratedTokens\n5,1,1\n4,1,1\n": "before the previous",
	} {
		_, err := ReadAzureTrace(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadAzureTrace(%q) error = %v, want %q", in, err, want)
		}
	}
}

// TestSharedTraces reads the real traces in ../shared when they are there.
func TestSharedTraces(t *testing.T) {
	for name, rows := range map[string]int{"conv.csv": 19366, "code.csv": 8819} {
		path := filepath.Join("..", "..", "..", "shared", "data", "azure-llm-2023", name)
		if _, err := os.Stat(path); err != nil {
			t.Skipf("shared trace data not present (%v)", err)
		}
		got, err := ReadAzureTraceFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != rows {
			t.Errorf("%s: %d rows, want %d", name, len(got), rows)
		}
		if last := got[len(got)-1].At; last < 50*time.Minute || last > 70*time.Minute {
			t.Errorf("%s spans %s, want about an hour", name, last)
		}
	}
}

func FuzzReadAzureTrace(f *testing.F) {
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n1.5,1,2\n2,3,4\n")
	f.Fuzz(func(t *testing.T, s string) {
		rows, err := ReadAzureTrace(strings.NewReader(s))
		if err != nil {
			return
		}
		for i, r := range rows {
			if r.Input < 0 || r.Output < 0 || r.At < 0 || (i > 0 && r.At < rows[i-1].At) {
				t.Fatalf("bad row %d: %+v", i, r)
			}
		}
	})
}
