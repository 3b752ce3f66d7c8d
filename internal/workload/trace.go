package workload

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// TraceRow is one request of an arrival trace.
type TraceRow struct {
	// At is the arrival offset from the trace's first row.
	At time.Duration
	// Input and Output are the request's context and generated token counts.
	Input, Output int
	// HashIDs are a Mooncake row's prompt blocks, in order: two requests
	// whose prompts begin with the same ids begin with the same blocks of
	// tokens (Replay builds them so). Nil for the other formats.
	HashIDs []int64
	// Turnaround is, for a closed loop's replay, the client's time
	// between its worker's previous answer's end and this row's send
	// (results.Sent.Turnaround); 0 for the other formats.
	Turnaround time.Duration
}

// TraceFormat is a trace file's format, as ReadTrace tells it from the
// content.
type TraceFormat string

// The trace formats ReadTrace knows.
const (
	// TraceAzure is an Azure LLM inference trace (2023 and the multi-day
	// 2024 release): CSV TIMESTAMP,ContextTokens,GeneratedTokens.
	TraceAzure TraceFormat = "azure"
	// TraceBurstGPT is a BurstGPT trace: CSV Timestamp (seconds), Model,
	// Request tokens, Response tokens, Total tokens, Log Type.
	TraceBurstGPT TraceFormat = "burstgpt"
	// TraceMooncake is a Mooncake trace: JSON lines of timestamp
	// (milliseconds), input_length, output_length and hash_ids.
	TraceMooncake TraceFormat = "mooncake"
)

// traceFormats says what each format looks like, for the error a file of
// none of them gets.
const traceFormats = `want an Azure LLM inference CSV (columns TIMESTAMP,ContextTokens,GeneratedTokens), ` +
	`a BurstGPT CSV (columns Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type) ` +
	`or Mooncake JSON lines (keys timestamp, input_length, output_length, hash_ids)`

// Trace is a trace file's requests.
type Trace struct {
	Format TraceFormat
	Rows   []TraceRow
	// Skipped counts the rows TraceFilter left out.
	Skipped int
}

// TraceFilter selects a trace's rows as it is read.
type TraceFilter struct {
	// Model keeps a BurstGPT trace's rows of this model (as the Model
	// column spells it, case aside); empty keeps every row. Other formats
	// have no model column, so a model is an error for them.
	Model string
}

// traceTimeLayouts are the timestamp formats of the Azure LLM inference
// traces: 2023's "2023-11-16 18:15:46.6805900" and 2024's, with a zone
// offset ("2024-05-10 00:00:00.009930+00:00"); fractional seconds of any
// length.
var traceTimeLayouts = []string{"2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00"}

// ReadTrace reads a trace of any format it knows, telling them apart by
// content: JSON lines are Mooncake's, a CSV header names Azure's columns or
// BurstGPT's. Rows come back in file order with At relative to the first
// kept row; a row that goes back in time is an error, as is a negative or
// non-numeric token count. The error for a file of no known format names
// the columns each format has.
func ReadTrace(r io.Reader, f TraceFilter) (*Trace, error) {
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		b, err := br.Peek(1)
		if err != nil {
			return nil, errors.New("trace has no rows; " + traceFormats)
		}
		if c := b[0]; c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			break
		}
		_, _ = br.ReadByte()
	}
	if b, _ := br.Peek(3); bytes.Equal(b, []byte("\xEF\xBB\xBF")) { // a UTF-8 byte-order mark
		_, _ = br.Discard(3)
	}
	var (
		t   *Trace
		err error
	)
	if b, _ := br.Peek(1); len(b) == 1 && b[0] == '{' {
		if f.Model != "" {
			return nil, modelError("a Mooncake trace has no model column to filter on")
		}
		t, err = readMooncake(br)
	} else {
		t, err = readTraceCSV(&lineLimiter{r: br}, f)
	}
	if err != nil {
		return nil, err
	}
	if len(t.Rows) == 0 {
		if t.Skipped > 0 {
			return nil, modelError(fmt.Sprintf("no row of the trace's %d is of model %q", t.Skipped, f.Model))
		}
		return nil, errors.New("trace has no rows")
	}
	return t, nil
}

// ModelError is a TraceFilter.Model the trace cannot satisfy: the format
// has no model column, or no row is of that model.
type ModelError string

func (e ModelError) Error() string { return string(e) }

func modelError(s string) error { return ModelError(s) }

// ReadTraceFile reads the trace at path (ReadTrace).
func ReadTraceFile(path string, f TraceFilter) (*Trace, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer func() { _ = file.Close() }() // opened for reading: a failed Close loses nothing
	t, err := ReadTrace(file, f)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return t, nil
}

// rowClock makes trace instants offsets from the first row's, refusing one
// that goes back in time.
type rowClock struct {
	first, prev time.Time
	n           int
}

func (c *rowClock) at(ts time.Time) (time.Duration, error) {
	if c.n > 0 && ts.Before(c.prev) {
		return 0, errors.New("timestamp is before the previous row's")
	}
	if c.n == 0 {
		c.first = ts
	}
	c.n++
	c.prev = ts
	return ts.Sub(c.first), nil
}

// columnKey is a CSV header name as the formats are matched: lower case,
// without spaces or underscores ("Request tokens" is "requesttokens").
func columnKey(s string) string {
	return strings.NewReplacer(" ", "", "_", "").Replace(strings.ToLower(strings.TrimSpace(s)))
}

// maxTraceLine bounds one line of a CSV trace (a row is a few dozen
// bytes): a file that is not a trace (a binary file, /dev/zero) fails at
// once instead of being held whole as one line.
const maxTraceLine = 1 << 20

// lineLimiter fails a read once more than maxTraceLine bytes have passed
// without a line end.
type lineLimiter struct {
	r   io.Reader
	run int
}

func (l *lineLimiter) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if i := bytes.LastIndexByte(p[:n], '\n'); i >= 0 {
		l.run = n - 1 - i
	} else {
		l.run += n
	}
	if l.run > maxTraceLine {
		return 0, fmt.Errorf("a line over %d bytes: this is not a trace", maxTraceLine)
	}
	return n, err
}

// readTraceCSV reads an Azure or a BurstGPT trace by its header.
func readTraceCSV(r io.Reader, f TraceFilter) (*Trace, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord, cr.ReuseRecord, cr.TrimLeadingSpace = -1, true, true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("line 1: %w; %s", err, traceFormats)
	}
	col := map[string]int{}
	for i, h := range header {
		col[columnKey(h)] = i
	}
	has := func(names ...string) bool {
		for _, n := range names {
			if _, ok := col[n]; !ok {
				return false
			}
		}
		return true
	}
	t := &Trace{}
	var ts, in, out, model int
	switch {
	case has("timestamp", "contexttokens", "generatedtokens"):
		t.Format, ts, in, out, model = TraceAzure, col["timestamp"], col["contexttokens"], col["generatedtokens"], -1
		if f.Model != "" {
			return nil, modelError("an Azure trace has no model column to filter on")
		}
	case has("timestamp", "requesttokens", "responsetokens"):
		t.Format, ts, in, out = TraceBurstGPT, col["timestamp"], col["requesttokens"], col["responsetokens"]
		model = -1
		if m, ok := col["model"]; ok {
			model = m
		} else if f.Model != "" {
			return nil, modelError("this BurstGPT trace has no Model column to filter on")
		}
	default:
		return nil, fmt.Errorf("line 1: header %q is not a trace's: %s", strings.Join(header, ","), traceFormats)
	}
	need := max(ts, in, out, model) + 1
	var clock rowClock
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if len(rec) < need {
			return nil, fmt.Errorf("line %d: %d fields, want at least %d", line, len(rec), need)
		}
		if model >= 0 && f.Model != "" && !strings.EqualFold(strings.TrimSpace(rec[model]), f.Model) {
			t.Skipped++
			continue
		}
		row, err := csvRow(t.Format, rec[ts], rec[in], rec[out], &clock)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		t.Rows = append(t.Rows, row)
	}
}

// csvRow reads one CSV row's fields.
func csvRow(format TraceFormat, ts, in, out string, clock *rowClock) (TraceRow, error) {
	var (
		at  time.Time
		err error
	)
	if format == TraceBurstGPT {
		at, err = secondsTime(strings.TrimSpace(ts))
	} else {
		at, err = parseTraceTime(strings.TrimSpace(ts))
	}
	if err != nil {
		return TraceRow{}, fmt.Errorf("timestamp: %w", err)
	}
	inName, outName := "ContextTokens", "GeneratedTokens"
	if format == TraceBurstGPT {
		inName, outName = "Request tokens", "Response tokens"
	}
	row := TraceRow{}
	if row.Input, err = parseCount(in); err != nil {
		return row, fmt.Errorf("%s: %w", inName, err)
	}
	if row.Output, err = parseCount(out); err != nil {
		return row, fmt.Errorf("%s: %w", outName, err)
	}
	if row.At, err = clock.at(at); err != nil {
		return row, fmt.Errorf("%s: %w", strings.TrimSpace(ts), err)
	}
	return row, nil
}

// mooncakeRow is one line of a Mooncake trace.
type mooncakeRow struct {
	Timestamp    float64 // milliseconds
	InputLength  int
	OutputLength int
	HashIDs      []int64
}

// readMooncake reads a Mooncake trace's JSON lines. Keys are matched
// exactly; unknown keys are ignored (the published traces differ in the
// extras they carry); timestamp, input_length and output_length are
// required.
func readMooncake(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	t := &Trace{Format: TraceMooncake}
	var clock rowClock
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		m, err := decodeMooncake(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		at, err := clock.at(time.Unix(0, 0).Add(time.Duration(m.Timestamp * float64(time.Millisecond))))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		t.Rows = append(t.Rows, TraceRow{At: at, Input: m.InputLength, Output: m.OutputLength, HashIDs: m.HashIDs})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading trace: %w", err)
	}
	return t, nil
}

// decodeMooncake reads one Mooncake line with exact keys.
func decodeMooncake(b []byte) (mooncakeRow, error) {
	var raw map[string]json.RawMessage
	var m mooncakeRow
	if err := json.Unmarshal(b, &raw); err != nil {
		return m, fmt.Errorf("not a JSON object (%w); %s", err, traceFormats)
	}
	for _, k := range []string{"timestamp", "input_length", "output_length"} {
		if _, ok := raw[k]; !ok {
			return m, fmt.Errorf("no key %q; %s", k, traceFormats)
		}
	}
	if err := json.Unmarshal(raw["timestamp"], &m.Timestamp); err != nil || m.Timestamp < 0 || m.Timestamp > 1e15 || math.IsNaN(m.Timestamp) {
		return m, fmt.Errorf("timestamp %s: want milliseconds, a number from 0", raw["timestamp"])
	}
	for _, c := range []struct {
		key string
		to  *int
	}{{"input_length", &m.InputLength}, {"output_length", &m.OutputLength}} {
		if err := json.Unmarshal(raw[c.key], c.to); err != nil || *c.to < 0 {
			return m, fmt.Errorf("%s %s: want a whole number from 0", c.key, raw[c.key])
		}
	}
	if h, ok := raw["hash_ids"]; ok && string(h) != "null" {
		if err := json.Unmarshal(h, &m.HashIDs); err != nil {
			return m, fmt.Errorf("hash_ids: want an array of whole numbers (%w)", err)
		}
	}
	return m, nil
}

func parseTraceTime(s string) (time.Time, error) {
	for _, layout := range traceTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	t, err := secondsTime(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither YYYY-MM-DD hh:mm:ss[.frac][±hh:mm] nor seconds", s)
	}
	return t, nil
}

// secondsTime reads a timestamp in seconds.
func secondsTime(s string) (time.Time, error) {
	sec, err := strconv.ParseFloat(s, 64)
	if err != nil || sec < 0 || sec > 1e12 || sec != sec {
		return time.Time{}, fmt.Errorf("%q is not a number of seconds from 0", s)
	}
	return time.Unix(0, 0).Add(time.Duration(sec * float64(time.Second))), nil
}

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("%d is negative", n)
	}
	if n > MaxTokens {
		return 0, fmt.Errorf("%d tokens is over the %d a request may hold", n, MaxTokens)
	}
	return n, nil
}
