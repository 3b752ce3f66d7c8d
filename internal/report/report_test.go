package report

import (
	"bytes"
	"strings"
	"testing"
)

func TestSmokeText(t *testing.T) {
	rep := collect(Options{}, baseline(200, 10, 1))
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(b.String(), "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("line %d has %d columns: %q", i+1, n, line)
		}
	}
	t.Log("\n" + b.String())
}
