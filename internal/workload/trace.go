package workload

import (
	"bufio"
	"errors"
	"fmt"
	"io"
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
}

// traceTimeLayout is the timestamp format of the Azure LLM inference traces
// (2023): "2023-11-16 18:15:46.6805900", fractional seconds of any length.
const traceTimeLayout = "2006-01-02 15:04:05.999999999"

// ReadAzureTrace reads an Azure LLM inference trace: a CSV file with the
// header TIMESTAMP,ContextTokens,GeneratedTokens and one request per row.
// Timestamps may also be plain numbers of seconds. Rows come back in file
// order with At relative to the earliest timestamp; a row that goes back in
// time is an error, as is a negative or non-numeric token count.
func ReadAzureTrace(r io.Reader) ([]TraceRow, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var (
		rows          []TraceRow
		first, prev   time.Time
		col           = [3]int{-1, -1, -1}
		line          int
		headerHandled bool
	)
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		fields := strings.Split(text, ",")
		if !headerHandled {
			headerHandled = true
			for i, f := range fields {
				switch strings.ToLower(strings.TrimSpace(f)) {
				case "timestamp":
					col[0] = i
				case "contexttokens":
					col[1] = i
				case "generatedtokens":
					col[2] = i
				}
			}
			for i, name := range []string{"TIMESTAMP", "ContextTokens", "GeneratedTokens"} {
				if col[i] < 0 {
					return nil, fmt.Errorf("line 1: header lacks the column %s (want TIMESTAMP,ContextTokens,GeneratedTokens)", name)
				}
			}
			continue
		}
		if n := max(col[0], col[1], col[2]); len(fields) <= n {
			return nil, fmt.Errorf("line %d: %d fields, want at least %d", line, len(fields), n+1)
		}
		ts, err := parseTraceTime(strings.TrimSpace(fields[col[0]]))
		if err != nil {
			return nil, fmt.Errorf("line %d: timestamp: %w", line, err)
		}
		in, err := parseCount(fields[col[1]])
		if err != nil {
			return nil, fmt.Errorf("line %d: ContextTokens: %w", line, err)
		}
		out, err := parseCount(fields[col[2]])
		if err != nil {
			return nil, fmt.Errorf("line %d: GeneratedTokens: %w", line, err)
		}
		if len(rows) == 0 {
			first = ts
		} else if ts.Before(prev) {
			return nil, fmt.Errorf("line %d: timestamp %s is before the previous row's", line, fields[col[0]])
		}
		prev = ts
		rows = append(rows, TraceRow{At: ts.Sub(first), Input: in, Output: out})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading trace: %w", err)
	}
	if len(rows) == 0 {
		return nil, errors.New("trace has no rows")
	}
	return rows, nil
}

// ReadAzureTraceFile reads the trace at path.
func ReadAzureTraceFile(path string) ([]TraceRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer func() { _ = f.Close() }() // opened for reading: a failed Close loses nothing
	rows, err := ReadAzureTrace(f)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return rows, nil
}

func parseTraceTime(s string) (time.Time, error) {
	if t, err := time.Parse(traceTimeLayout, s); err == nil {
		return t, nil
	}
	sec, err := strconv.ParseFloat(s, 64)
	if err != nil || sec < 0 || sec > 1e12 || sec != sec {
		return time.Time{}, fmt.Errorf("%q is neither YYYY-MM-DD hh:mm:ss[.frac] nor seconds", s)
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
	return n, nil
}
