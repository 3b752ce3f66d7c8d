package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Formats lists the output formats of `tokentrace report`.
var Formats = []string{"text", "md", "json", "csv", "html"}

// Config is `tokentrace report`'s configuration.
type Config struct {
	// Paths are results folders or requests.jsonl files, reported together;
	// with Compare, exactly two: the baseline A and the candidate B.
	Paths   []string
	Compare bool
	// Format is one of Formats; empty means text.
	Format string
	// Output is the file to write; empty means standard output, except for
	// html, which defaults to report.html in the (first) results folder
	// (compare.html in run A's folder with Compare).
	Output string
	Options
}

// Run reads the inputs and writes the report (or the comparison) in the
// configured format to Output or stdout. When it writes a file it prints
// the file's path to stdout.
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	format := strings.ToLower(cfg.Format)
	if format == "" {
		format = "text"
	}
	if !slices.Contains(Formats, format) {
		return fmt.Errorf("unknown format %q (known: %s)", cfg.Format, strings.Join(Formats, ", "))
	}
	if len(cfg.Paths) == 0 {
		return errors.New("give a results folder or a requests.jsonl file")
	}
	out := cfg.Output
	if out == "" && format == "html" {
		name := "report.html"
		if cfg.Compare {
			name = "compare.html" // beside run A, leaving its report.html alone
		}
		out = filepath.Join(resultsDir(cfg.Paths[0]), name)
	}
	var write func(io.Writer) error
	if cfg.Compare {
		if len(cfg.Paths) != 2 {
			return fmt.Errorf("--compare takes exactly two runs (A B), got %d", len(cfg.Paths))
		}
		ra, err := Load(ctx, cfg.Paths[:1], cfg.Options)
		if err != nil {
			return fmt.Errorf("run A: %w", err)
		}
		rb, err := Load(ctx, cfg.Paths[1:], cfg.Options)
		if err != nil {
			return fmt.Errorf("run B: %w", err)
		}
		c := Compare(ra, rb)
		switch format {
		case "text":
			write = c.WriteText
		case "md":
			write = c.WriteMarkdown
		case "json":
			write = c.WriteJSON
		case "html":
			write = c.WriteHTML
		default:
			return fmt.Errorf("--compare writes text, md, json or html, not %s", format)
		}
	} else {
		rep, err := Load(ctx, cfg.Paths, cfg.Options)
		if err != nil {
			return err
		}
		write = map[string]func(io.Writer) error{
			"text": rep.WriteText, "md": rep.WriteMarkdown, "json": rep.WriteJSON,
			"csv": rep.WriteCSV, "html": rep.WriteHTML,
		}[format]
	}
	if out == "" || out == "-" {
		return write(stdout)
	}
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "report written to %s\n", out)
	return err
}

// resultsDir is the folder a path stands for: itself, or a file's folder.
func resultsDir(p string) string {
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		return p
	}
	return filepath.Dir(p)
}
