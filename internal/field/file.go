package field

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxFileBytes bounds a settings file read whole (a configuration, a GPU
// catalog, a price table, a profile, a model's config.json): the largest
// of these is a few hundred KiB.
const MaxFileBytes = 16 << 20

// ErrFileTooLarge is wrapped by ReadFile's error for a file over its bound
// (or one that does not end, such as /dev/zero).
var ErrFileTooLarge = errors.New("file too large")

// ReadFile reads the file at path whole, up to limit bytes (MaxFileBytes
// when limit ≤ 0): a larger file, or one that does not end, is an error
// that names it and the bound, and nothing more than limit+1 bytes is ever
// held.
func ReadFile(path string, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = MaxFileBytes
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // opened for reading: a failed Close loses nothing
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, at most %d are read", path, ErrFileTooLarge, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: it does not end within %d bytes, the most read", path, ErrFileTooLarge, limit)
	}
	return data, nil
}

// Escape shows text that may come from a file as printable text: control
// bytes (but for new lines and tabs) and invalid UTF-8 are written as Go
// escapes (\x00, \u007f), so a binary file quoted in an error cannot reach
// the terminal raw.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || (unicode.IsControl(r) && r != '\n' && r != '\t') {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t' || !unicode.IsControl(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}
