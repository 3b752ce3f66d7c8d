package results

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
)

// Every record schema this project ever wrote (v0: no "v" key, before the
// version was written; v1; v2 with hop-stamped timing) reads as
// encoding/json reads it, and a version newer than this build's is an
// error naming the line.
func TestEachRecordReadsEveryVersionWritten(t *testing.T) {
	path := filepath.Join("testdata", "versions.jsonl")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []latency.Record
	for _, l := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		var r latency.Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	if len(want) != latency.RecordSchema+1 {
		t.Fatalf("testdata holds %d versions; latency.RecordSchema is %d: add a line of the new version", len(want), latency.RecordSchema)
	}
	var got []latency.Record
	err = EachRecord(path, func(_ int, r *latency.Record, err error) error {
		if err != nil {
			return err
		}
		c := *r
		c.ChunkNS = append([]int64(nil), r.ChunkNS...)
		c.Timing = append([]latency.HopStage(nil), r.Timing...)
		got = append(got, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	norm := func(rs []latency.Record) []latency.Record {
		for i := range rs {
			rs[i] = normalize(rs[i])
		}
		return rs
	}
	if diff := cmp.Diff(norm(want), norm(got)); diff != "" {
		t.Errorf("(-encoding/json +EachRecord):\n%s", diff)
	}

	newer := filepath.Join(t.TempDir(), RequestsFile)
	line := `{"v":` + strings.Repeat("9", 1) + `,"id":"future"}` + "\n"
	if err := os.WriteFile(newer, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	var lineErr error
	_ = EachRecord(newer, func(_ int, _ *latency.Record, err error) error { lineErr = err; return nil })
	if lineErr == nil || !strings.Contains(lineErr.Error(), "newer") {
		t.Errorf("a v9 record: %v, want an error saying it is newer", lineErr)
	}
}
