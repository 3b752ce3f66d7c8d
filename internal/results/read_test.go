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
	got, err := ReadRecords(path) // EachRecord, each record kept whole
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

// ReadRecords keeps each record whole: the next line's chunks do not
// overwrite the ones before (EachRecord reuses its record's storage).
func TestReadRecordsKeepsEachRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), RequestsFile)
	w, err := NewRecordWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []latency.Record{
		{Schema: latency.RecordSchema, ID: "a", Stream: true, ChunkNS: []int64{1, 2, 3}, ChunkTokens: []int32{1, 1, 1}, OtherNS: []int64{1}},
		{Schema: latency.RecordSchema, ID: "b", Stream: true, ChunkNS: []int64{7, 8}, ChunkTokens: []int32{2, 2}, OtherNS: []int64{6}},
	}
	for i := range want {
		w.Write(&want[i])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRecords(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-written +read):\n%s", diff)
	}
	if err := os.WriteFile(path, []byte("{\"id\":\"a\"}\nnot a record\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRecords(path); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a malformed line: %v, want an error naming line 2", err)
	}
}
