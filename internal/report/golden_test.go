package report

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// sweepReqs is a sweep of four rate points, past capacity from 16 req/s.
func sweepReqs() []synthReq {
	var sweep []synthReq
	for i, rate := range []float64{4, 8, 16, 32} {
		pts := baseline(120, rate, uint64(20+i))
		for j := range pts {
			pts[j].at += float64(i) * 40000
			pts[j].phase = fmt.Sprintf("rate=%g", rate)
			if rate > 10 { // past capacity: the queue builds within the step
				pts[j].sq += float64(j) * 1000 / 10 * (1 - 10/rate)
			}
		}
		sweep = append(sweep, pts...)
	}
	return sweep
}

// goldenRuns are fixed synthetic runs whose reports are checked in.
func goldenRuns(t *testing.T) map[string]*Report {
	overload := overloadRun(300)
	for i := 0; i < 6; i++ {
		overload[40*i+7].err = latency.FailTimeout
	}
	sweep := sweepReqs()
	errs := baseline(12, 10, 5)
	for i := range errs {
		errs[i].err = []latency.ErrorKind{latency.FailConnect, latency.FailHTTP5xx, latency.FailRateLimited}[i%3]
	}
	slos := mustSLOs(t, "ttft:p99<=500ms,tpot:p99<=50ms,e2e:p95<=3s")
	return map[string]*Report{
		"healthy":     collect(Options{SLOs: slos}, baseline(400, 10, 1)),
		"overload":    collect(Options{SLOs: slos}, overload),
		"sweep":       collect(Options{SLOs: slos}, sweep),
		"only-errors": collect(Options{SLOs: slos}, errs),
	}
}

func TestGolden(t *testing.T) {
	for name, rep := range goldenRuns(t) {
		for _, f := range []struct {
			ext   string
			write func(*bytes.Buffer) error
		}{
			{"txt", func(b *bytes.Buffer) error { return rep.WriteText(b) }},
			{"md", func(b *bytes.Buffer) error { return rep.WriteMarkdown(b) }},
			{"json", func(b *bytes.Buffer) error { return rep.WriteJSON(b) }},
		} {
			var b bytes.Buffer
			if err := f.write(&b); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", name+"."+f.ext)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if diff := cmp.Diff(string(want), b.String()); diff != "" {
				t.Errorf("%s differs from the golden file (-want +got; -update to accept):\n%s", path, diff)
			}
			if f.ext == "txt" {
				for i, line := range strings.Split(b.String(), "\n") {
					if n := len([]rune(line)); n > 100 {
						t.Errorf("%s line %d is %d columns wide", path, i+1, n)
					}
					if strings.HasSuffix(line, " ") {
						t.Errorf("%s line %d ends in a space", path, i+1)
					}
				}
			}
		}
	}
}
