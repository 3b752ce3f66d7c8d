package report

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/field"
)

// Formats lists the output formats of `tokentrace report`.
var Formats = []string{"text", "md", "json", "csv", "series-csv", "html"}

// compareFormats are the formats a comparison is written in.
var compareFormats = []string{"text", "md", "json", "html"}

// Config is what to report: one report over Paths, or with Compare the
// comparison of two runs, in Format. A bad one gives a *field.Error
// (format, compare).
type Config struct {
	// Paths are results folders or requests.jsonl files, reported together;
	// with Compare, exactly two: the baseline A and the candidate B.
	Paths   []string
	Compare bool
	// Format is one of Formats; empty means text.
	Format string
	Options
}

// format is the configured format, lower case, text by default.
func (c Config) format() string {
	if c.Format == "" {
		return "text"
	}
	return strings.ToLower(c.Format)
}

// Validate checks the format and the number of runs.
func (c Config) Validate() error {
	f := c.format()
	switch {
	case !slices.Contains(Formats, f):
		return field.Invalid("format", c.Format, "unknown format (known: %s)", strings.Join(Formats, ", "))
	case len(c.Paths) == 0:
		return field.Errorf("paths", "give a results folder or a requests.jsonl file")
	case c.Compare && len(c.Paths) != 2:
		return field.Errorf("compare", "takes exactly two runs (A B), got %d", len(c.Paths))
	case c.Compare && !slices.Contains(compareFormats, f):
		return field.Invalid("format", c.Format, "a comparison is written as %s", strings.Join(compareFormats, ", "))
	case c.GPUs < 0:
		return field.Invalid("gpus", c.GPUs, "a count of GPUs is 0 (per replica) or more")
	}
	return nil
}

// DefaultFile is where the configured format goes when no file is named:
// "" (standard output), except html, which goes to report.html in the
// (first) results folder, or compare.html in run A's with Compare.
func (c Config) DefaultFile() string {
	if c.format() != "html" || len(c.Paths) == 0 {
		return ""
	}
	name := "report.html"
	if c.Compare {
		name = "compare.html" // beside run A, leaving its report.html alone
	}
	return filepath.Join(resultsDir(c.Paths[0]), name)
}

// Loaded is a report or a comparison loaded from its runs, ready to write
// in the configured format.
type Loaded struct {
	// Report is the report; nil for a comparison.
	Report *Report
	write  func(io.Writer) error
}

// Write writes the report or comparison in the configured format.
func (l *Loaded) Write(w io.Writer) error { return l.write(w) }

// LoadConfig validates cfg and loads its runs: the report over its Paths
// (Collect, then Collector.Report), or with Compare the comparison of its
// two runs, each collected alone. Nothing is written until Loaded.Write.
func LoadConfig(ctx context.Context, cfg Config) (*Loaded, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Compare {
		return loadComparison(ctx, cfg)
	}
	c, err := Collect(ctx, cfg.Paths, cfg.Options)
	if err != nil {
		return nil, err
	}
	rep := c.Report()
	return &Loaded{Report: rep, write: map[string]func(io.Writer) error{
		"text": withCompat(rep.WriteText, func(w io.Writer) { WriteCompat(w, "compat", rep.Compat) }), "md": rep.WriteMarkdown, "json": rep.WriteJSON,
		"csv": c.WriteCSV, "series-csv": rep.WriteSeriesCSV, "html": rep.WriteHTML,
	}[cfg.format()]}, nil
}

// loadComparison loads a comparison's two runs (A, the baseline, and B).
func loadComparison(ctx context.Context, cfg Config) (*Loaded, error) {
	ca, err := Collect(ctx, cfg.Paths[:1], cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("run A: %w", err)
	}
	cb, err := Collect(ctx, cfg.Paths[1:], cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("run B: %w", err)
	}
	c := Compare(ca, cb)
	va, vb := ca.compat.views(), cb.compat.views()
	text := withCompat(c.WriteText, func(w io.Writer) { writeCompatCompare(w, va, vb) })
	return &Loaded{write: map[string]func(io.Writer) error{
		"text": text, "md": c.WriteMarkdown, "json": c.WriteJSON, "html": c.WriteHTML,
	}[cfg.format()]}, nil
}

// withCompat is a text form followed, after a blank line, by what compat
// writes: the runs' compatibility views (the text form alone when compat
// writes nothing, no run having streamed).
func withCompat(text func(io.Writer) error, compat func(io.Writer)) func(io.Writer) error {
	return func(w io.Writer) error {
		if err := text(w); err != nil {
			return err
		}
		var b strings.Builder
		compat(&b)
		if b.Len() == 0 {
			return nil
		}
		_, err := io.WriteString(w, "\n"+b.String())
		return err
	}
}

// resultsDir is the folder a path stands for: itself, or a file's folder.
func resultsDir(p string) string {
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		return p
	}
	return filepath.Dir(p)
}
