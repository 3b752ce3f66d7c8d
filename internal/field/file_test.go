package field

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestReadFileIsBounded(t *testing.T) {
	dir := t.TempDir()
	small, big := filepath.Join(dir, "small"), filepath.Join(dir, "big")
	if err := os.WriteFile(small, []byte("gpu: H100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, 2048), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(small, 1024); err != nil || string(b) != "gpu: H100\n" {
		t.Errorf("small: %q %v", b, err)
	}
	if _, err := ReadFile(big, 1024); !errors.Is(err, ErrFileTooLarge) || !strings.Contains(err.Error(), big) {
		t.Errorf("big: %v, want ErrFileTooLarge naming the file", err)
	}
	if runtime.GOOS == "linux" {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := ReadFile("/dev/zero", 1<<20)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrFileTooLarge) {
			t.Errorf("/dev/zero: %v", err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
			t.Errorf("/dev/zero with a 1 MiB bound allocated %d MiB", got>>20)
		}
	}
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\twith a tab\n": "plain text\twith a tab\n",
		"\x7fELF\x02\x00":          `\x7fELF\x02\x00`,
		"bad \xff utf-8":           `bad \xff utf-8`,
		"ünïcode":                  "ünïcode",
		"\x1b[31mred":              `\x1b[31mred`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}
