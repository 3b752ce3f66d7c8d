package jsonscan

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// DefaultMaxDepth is the nesting depth Skip and Value allow when
// Scanner.MaxDepth is 0.
const DefaultMaxDepth = 128

// Scanner reads JSON from an in-memory input, one token at a time. The zero
// value scans an empty input; use New.
type Scanner struct {
	buf []byte
	pos int
	// MaxDepth bounds Skip and Value: they refuse a value with elements
	// nested more than MaxDepth levels below it (0: DefaultMaxDepth), so
	// that a hostile input cannot exhaust the stack.
	MaxDepth int
}

// New returns a Scanner at the start of b. It does not copy b; strings
// and numbers it returns are slices of b.
func New(b []byte) Scanner { return Scanner{buf: b} }

// Pos returns the offset of the next byte to read.
func (s *Scanner) Pos() int { return s.pos }

// SyntaxError is a scanning error at a byte offset of the input.
type SyntaxError struct {
	Offset int    // bytes from the start of the input
	Msg    string // what is wrong
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("offset %d: %s", e.Offset, e.Msg) }

// Errorf returns a SyntaxError at the current offset. Callers use it for
// errors of their own about the document's shape.
func (s *Scanner) Errorf(format string, a ...any) error {
	return &SyntaxError{Offset: s.pos, Msg: fmt.Sprintf(format, a...)}
}

func (s *Scanner) errAt(at int, msg string) error { return &SyntaxError{Offset: at, Msg: msg} }

// SkipSpace passes over white space.
func (s *Scanner) SkipSpace() {
	// Compact JSON has none: one comparison decides (every white space
	// byte is below '!').
	if s.pos >= len(s.buf) || s.buf[s.pos] > ' ' {
		return
	}
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// Peek passes over white space and returns the next byte without reading
// it, or 0 at the end of the input.
func (s *Scanner) Peek() byte {
	s.SkipSpace()
	if s.pos < len(s.buf) {
		return s.buf[s.pos]
	}
	return 0
}

// Expect reads the byte c (after white space).
func (s *Scanner) Expect(c byte) error {
	if s.Peek() != c {
		return s.unexpected(fmt.Sprintf("%q", c))
	}
	s.pos++
	return nil
}

func (s *Scanner) unexpected(want string) error {
	if s.pos >= len(s.buf) {
		return s.Errorf("unexpected end of input, want %s", want)
	}
	return s.Errorf("unexpected %q, want %s", s.buf[s.pos], want)
}

// End checks that only white space is left.
func (s *Scanner) End() error {
	if s.SkipSpace(); s.pos != len(s.buf) {
		return s.Errorf("unexpected data after the value")
	}
	return nil
}

// Str is a string read from the input.
type Str struct {
	// Raw is the content between the quotes, escapes as they are: a slice
	// of the input.
	Raw []byte
	// Start is the offset of Raw in the input.
	Start int
	// Escaped tells whether Raw holds backslash escapes.
	Escaped bool
	// NonASCII tells whether Raw holds bytes of 0x80 or more.
	NonASCII bool
}

// End is the offset just past Raw in the input (the closing quote).
func (t Str) End() int { return t.Start + len(t.Raw) }

// special reports, for a little-endian word of 8 bytes, whether any byte is
// a quote, a backslash or a control character (non-zero if so).
func special(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := x ^ ('"' * lo)
	bs := x ^ ('\\' * lo)
	return ((x - 0x20*lo) | (q - lo) | (bs - lo)) &^ x & hi
}

// String reads a string (after white space) and checks its escapes and
// that it holds no control characters, as encoding/json does. Invalid UTF-8
// is accepted (encoding/json replaces it with U+FFFD; Unquote does too).
func (s *Scanner) String() (Str, error) {
	start, end, flags, err := s.str()
	if err != nil {
		return Str{}, err
	}
	return Str{Raw: s.buf[start:end:end], Start: start, Escaped: flags&strEscaped != 0, NonASCII: flags&strNonASCII != 0}, nil
}

// The flags str reports.
const (
	strEscaped  = 1 << iota // the string holds escapes
	strNonASCII             // it holds bytes of 0x80 or more
)

// str reads a string like String and returns where its content starts
// and ends in the input, and its flags: a few words, returned in
// registers (a Str is not), for the hot loops of Member and Skip.
func (s *Scanner) str() (start, end int, flags uint8, err error) {
	b, i := s.buf, s.pos
	if i >= len(b) || b[i] != '"' {
		if s.Peek() != '"' {
			return 0, 0, 0, s.unexpected("a string")
		}
		i = s.pos
	}
	start = i + 1
	i = start
	var acc uint64 // OR of the bytes passed, for NonASCII
	// The common string, without escapes, eight bytes at a time; the
	// rest (escapes, control characters, the input's last bytes) in
	// strSlow.
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		m := special(x)
		if m == 0 {
			acc |= x
			i += 8
			continue
		}
		// The lowest flagged byte is the first special one (the test's
		// false positives lie above a true one).
		k := bits.TrailingZeros64(m) >> 3
		acc |= x & (1<<(k<<3) - 1)
		i += k
		if b[i] != '"' {
			break
		}
		s.pos = i + 1
		if acc&0x8080808080808080 != 0 {
			flags = strNonASCII
		}
		return start, i, flags, nil
	}
	return s.strSlow(start, i, acc)
}

// strSlow goes on with str's string from b[i:], byte by byte.
func (s *Scanner) strSlow(start, i int, acc uint64) (_, end int, flags uint8, err error) {
	b := s.buf
	for {
		for i < len(b) {
			c := b[i]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
			acc |= uint64(c)
			i++
		}
		if i >= len(b) {
			s.pos = len(b)
			return 0, 0, 0, s.errAt(start-1, "unterminated string")
		}
		switch c := b[i]; {
		case c == '"':
			s.pos = i + 1
			if acc&0x8080808080808080 != 0 {
				flags |= strNonASCII
			}
			return start, i, flags, nil
		case c == '\\':
			flags |= strEscaped
			if i+1 >= len(b) {
				s.pos = len(b)
				return 0, 0, 0, s.errAt(start-1, "unterminated string")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || hex4(b[i+2:i+6]) < 0 {
					s.pos = i
					return 0, 0, 0, s.Errorf("bad \\u escape in string")
				}
				i += 6
			default:
				s.pos = i
				return 0, 0, 0, s.Errorf("bad escape in string")
			}
		default:
			s.pos = i
			return 0, 0, 0, s.Errorf("control character in string")
		}
	}
}

// hex4 decodes four hex digits, or returns -1.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// Number reads a number (after white space) by JSON's grammar and returns
// its text.
func (s *Scanner) Number() ([]byte, error) {
	s.SkipSpace()
	b, i := s.buf, s.pos
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return nil, s.unexpected("a number")
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			s.pos = j
			return nil, s.Errorf("invalid number: no digits after '.'")
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			s.pos = j
			return nil, s.Errorf("invalid number: no digits in the exponent")
		}
		i = j
	}
	s.pos = i
	return b[start:i], nil
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// Int64 reads an integer (after white space): a number without fraction or
// exponent that fits in an int64, as encoding/json decodes into an int64.
func (s *Scanner) Int64() (int64, error) {
	s.SkipSpace()
	b, i := s.buf, s.pos
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	v, i := decimal(b, i)
	n := i - start
	if n == 0 || n > 1 && b[start] == '0' || i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return s.notInt()
	}
	if n > 18 && !fits(b[start:i], neg) {
		return 0, s.Errorf("integer %s out of range", b[s.pos:i])
	}
	s.pos = i
	if neg {
		return -int64(v), nil
	}
	return int64(v), nil
}

// decimal reads the digits from b[i:] and returns their value (correct for
// up to 19 digits) and the offset past them. It takes eight digits at a time
// where it can.
func decimal(b []byte, i int) (uint64, int) {
	var v uint64
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		if (x&0xF0F0F0F0F0F0F0F0)|((x+0x0606060606060606)&0xF0F0F0F0F0F0F0F0)>>4 != 0x3333333333333333 {
			break
		}
		x = (x & 0x0F0F0F0F0F0F0F0F) * 2561 >> 8
		x = (x & 0x00FF00FF00FF00FF) * 6553601 >> 16
		x = (x & 0x0000FFFF0000FFFF) * 42949672960001 >> 32
		v = v*100000000 + x
		i += 8
	}
	for i < len(b) {
		c := b[i] - '0'
		if c > 9 {
			break
		}
		v = v*10 + uint64(c)
		i++
	}
	return v, i
}

// notInt makes Int64's error: an invalid number, or one that is not an
// integer.
func (s *Scanner) notInt() (int64, error) {
	at := s.pos
	num, err := s.Number()
	s.pos = at
	if err != nil {
		return 0, err
	}
	if bytes.ContainsAny(num, ".eE") {
		return 0, s.Errorf("%s is not an integer", num)
	}
	return 0, s.Errorf("invalid number: leading zero")
}

// fits reports whether the digits d (19 or more, no leading zero) fit in
// an int64 with the given sign.
func fits(d []byte, neg bool) bool {
	const maxAbs = "9223372036854775807"
	if len(d) != len(maxAbs) {
		return false
	}
	if string(d) == "9223372036854775808" {
		return neg
	}
	return string(d) <= maxAbs
}

// ParseInt parses b as a JSON integer: digits with an optional minus sign,
// no leading zeros, fraction or exponent, within int64's range.
func ParseInt(b []byte) (int64, error) {
	s := New(b)
	v, err := s.Int64()
	if err != nil {
		return 0, err
	}
	if s.pos != len(b) {
		return 0, s.Errorf("%s is not an integer", b)
	}
	return v, nil
}

// AppendInts reads an array of integers (after white space) and appends
// them to dst. Each must fit in T.
func AppendInts[T int | int32 | int64](s *Scanner, dst []T) ([]T, error) {
	if err := s.Expect('['); err != nil {
		return dst, err
	}
	if s.Peek() == ']' {
		s.pos++
		return dst, nil
	}
	b, i := s.buf, s.pos
	for {
		// The common case inline: up to 18 digits, no sign, no leading
		// zero, then ',' or ']'. Anything else takes Int64.
		at := i
		var u uint64
		u, i = decimal(b, i)
		v := int64(u)
		if n := i - at; n == 0 || n > 18 || n > 1 && b[at] == '0' || i >= len(b) || b[i] != ',' && b[i] != ']' {
			s.pos = at
			var err error
			if v, err = s.Int64(); err != nil {
				return dst, err
			}
			i = s.pos
		}
		if int64(T(v)) != v {
			s.pos = at
			s.SkipSpace()
			return dst, s.Errorf("integer %d out of range", v)
		}
		dst = append(dst, T(v))
		if i < len(b) {
			switch b[i] {
			case ',':
				i++
				continue
			case ']':
				s.pos = i + 1
				return dst, nil
			}
		}
		s.pos = i
		switch s.Peek() {
		case ',':
			i = s.pos + 1
		case ']':
			s.pos++
			return dst, nil
		default:
			return dst, s.unexpected("',' or ']' in array")
		}
	}
}

// literal reads word (true, false or null) at the current offset.
func (s *Scanner) literal(word string) error {
	if len(s.buf)-s.pos < len(word) || string(s.buf[s.pos:s.pos+len(word)]) != word {
		return s.Errorf("invalid literal, want %s", word)
	}
	s.pos += len(word)
	return nil
}

// Bool reads true or false (after white space).
func (s *Scanner) Bool() (bool, error) {
	switch s.Peek() {
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	}
	return false, s.unexpected("true or false")
}

// Null reads null if it is next (after white space) and reports whether
// it was.
func (s *Scanner) Null() bool {
	if s.Peek() == 'n' && len(s.buf)-s.pos >= 4 && string(s.buf[s.pos:s.pos+4]) == "null" {
		s.pos += 4
		return true
	}
	return false
}

// Object reads an object (after white space), calling field with each key;
// field must read the key's value.
func (s *Scanner) Object(field func(key Str) error) error {
	if err := s.Expect('{'); err != nil {
		return err
	}
	if s.Peek() == '}' {
		s.pos++
		return nil
	}
	for {
		k, err := s.String()
		if err != nil {
			return err
		}
		if s.pos < len(s.buf) && s.buf[s.pos] == ':' { // compact JSON
			s.pos++
		} else if err := s.Expect(':'); err != nil {
			return err
		}
		if err := field(k); err != nil {
			return err
		}
		switch s.Peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.unexpected("',' or '}' in object")
		}
	}
}

// Member reads the next member's key of an object whose '{' has been read
// (Expect) and the colon after it; first tells whether it is the first
// call for this object. key is the key's raw content (escaped tells
// whether it holds escapes: AppendUnquote gives its text). The caller
// then reads the value. ok is false, with a nil error, when the object
// ends: its '}' has been read. Object does the same with a callback;
// Member lets a hot loop do without one.
func (s *Scanner) Member(first bool) (key []byte, escaped, ok bool, err error) {
	var c byte
	if s.pos < len(s.buf) && s.buf[s.pos] > ' ' { // compact JSON: no white space to pass
		c = s.buf[s.pos]
	} else {
		c = s.Peek()
	}
	switch {
	case c == '}':
		s.pos++
		return nil, false, false, nil
	case !first && c == ',':
		s.pos++
	case !first:
		return nil, false, false, s.unexpected("',' or '}' in object")
	}
	start, end, flags, err := s.str()
	if err != nil {
		return nil, false, false, err
	}
	if s.pos < len(s.buf) && s.buf[s.pos] == ':' { // compact JSON
		s.pos++
	} else if err := s.Expect(':'); err != nil {
		return nil, false, false, err
	}
	return s.buf[start:end:end], flags&strEscaped != 0, true, nil
}

// Element moves to the next element of an array whose '[' has been read;
// first tells whether it is the first call for this array. The caller
// then reads the element. ok is false, with a nil error, when the array
// ends: its ']' has been read.
func (s *Scanner) Element(first bool) (ok bool, err error) {
	switch c := s.Peek(); {
	case c == ']':
		s.pos++
		return false, nil
	case first:
		return true, nil
	case c == ',':
		s.pos++
		return true, nil
	}
	return false, s.unexpected("',' or ']' in array")
}

// Array reads an array (after white space), calling elem with each
// element's index; elem must read the element.
func (s *Scanner) Array(elem func(i int) error) error {
	if err := s.Expect('['); err != nil {
		return err
	}
	if s.Peek() == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		switch s.Peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.unexpected("',' or ']' in array")
		}
	}
}

// Skip reads one value of any kind (after white space), checking it.
func (s *Scanner) Skip() error {
	max := s.MaxDepth
	if max == 0 {
		max = DefaultMaxDepth
	}
	return s.skip(0, max)
}

// Value reads one value like Skip and returns its text.
func (s *Scanner) Value() ([]byte, error) {
	s.SkipSpace()
	start := s.pos
	if err := s.Skip(); err != nil {
		return nil, err
	}
	return s.buf[start:s.pos], nil
}

func (s *Scanner) skip(depth, max int) error {
	if depth > max {
		return s.Errorf("nested too deeply")
	}
	switch c := s.Peek(); {
	case c == '"':
		_, _, _, err := s.str()
		return err
	case c == '{':
		return s.Object(func(Str) error { return s.skip(depth+1, max) })
	case c == '[':
		return s.Array(func(int) error { return s.skip(depth+1, max) })
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		_, err := s.Number()
		return err
	}
	return s.unexpected("a value")
}
