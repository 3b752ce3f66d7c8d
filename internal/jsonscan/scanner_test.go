package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestString(t *testing.T) {
	cases := []struct {
		in       string
		raw      string
		escaped  bool
		nonASCII bool
		value    string
		err      string
	}{
		{in: `""`, raw: ``, value: ``},
		{in: ` "plain text, long enough to take the 8-byte path" `, raw: `plain text, long enough to take the 8-byte path`, value: `plain text, long enough to take the 8-byte path`},
		{in: `"a\"b\\c\/d\b\f\n\r\t"`, raw: `a\"b\\c\/d\b\f\n\r\t`, escaped: true, value: "a\"b\\c/d\b\f\n\r\t"},
		{in: `"caf\u00e9 \ud83d\ude00"`, raw: `caf\u00e9 \ud83d\ude00`, escaped: true, value: "café 😀"},
		{in: `"lone \ud83d x"`, raw: `lone \ud83d x`, escaped: true, value: "lone \uFFFD x"},
		{in: `"lone \ude00\u0041"`, raw: `lone \ude00\u0041`, escaped: true, value: "lone \uFFFDA"},
		{in: `"naïve, and then some more text"`, raw: `naïve, and then some more text`, nonASCII: true, value: "naïve, and then some more text"},
		{in: "\"bad \xff utf-8\"", raw: "bad \xff utf-8", nonASCII: true, value: "bad \uFFFD utf-8"},
		{in: `"abc`, err: "offset 0: unterminated string"},
		{in: `"abc\`, err: "offset 0: unterminated string"},
		{in: `"a\qb"`, err: "offset 2: bad escape in string"},
		{in: `"a\u12g4"`, err: "offset 2: bad \\u escape in string"},
		{in: "\"01234567\x01\"", err: "offset 9: control character in string"},
		{in: `x`, err: "offset 0: unexpected 'x', want a string"},
		{in: ``, err: "offset 0: unexpected end of input, want a string"},
	}
	for _, c := range cases {
		s := New([]byte(c.in))
		got, err := s.String()
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if err := s.End(); err != nil {
			t.Errorf("%q: %v", c.in, err)
		}
		v, err := Unquote(got.Raw)
		if err != nil {
			t.Errorf("%q: unquote: %v", c.in, err)
		}
		if d := cmp.Diff([]any{c.raw, c.escaped, c.nonASCII, c.value, strings.Index(c.in, `"`) + 1},
			[]any{string(got.Raw), got.Escaped, got.NonASCII, v, got.Start}); d != "" {
			t.Errorf("%q (-want +got):\n%s", c.in, d)
		}
	}
}

func TestNumbers(t *testing.T) {
	cases := []struct {
		in     string
		number string // Number's text, or its error
		int64  string // Int64's value, or its error
	}{
		{"0", "0", "0"},
		{" -0 ", "-0", "0"},
		{"123456789", "123456789", "123456789"},
		{"9223372036854775807", "9223372036854775807", "9223372036854775807"},
		{"-9223372036854775808", "-9223372036854775808", "-9223372036854775808"},
		{"9223372036854775808", "9223372036854775808", "offset 0: integer 9223372036854775808 out of range"},
		{"-9223372036854775809", "-9223372036854775809", "offset 0: integer -9223372036854775809 out of range"},
		{"123456789012345678901", "123456789012345678901", "offset 0: integer 123456789012345678901 out of range"},
		{"1.5", "1.5", "offset 0: 1.5 is not an integer"},
		{"-2.5e+3", "-2.5e+3", "offset 0: -2.5e+3 is not an integer"},
		{"1E3", "1E3", "offset 0: 1E3 is not an integer"},
		{"01", "0", "offset 0: invalid number: leading zero"},
		{"1.", "offset 2: invalid number: no digits after '.'", "offset 2: invalid number: no digits after '.'"},
		{"1e+", "offset 3: invalid number: no digits in the exponent", "offset 3: invalid number: no digits in the exponent"},
		{"-", "offset 0: unexpected '-', want a number", "offset 0: unexpected '-', want a number"},
		{"+1", "offset 0: unexpected '+', want a number", "offset 0: unexpected '+', want a number"},
		{".5", "offset 0: unexpected '.', want a number", "offset 0: unexpected '.', want a number"},
	}
	for _, c := range cases {
		s := New([]byte(c.in))
		n, err := s.Number()
		got := string(n)
		if err != nil {
			got = err.Error()
		}
		s = New([]byte(c.in))
		v, err := s.Int64()
		gotInt := fmt.Sprint(v)
		if err != nil {
			gotInt = err.Error()
		}
		if d := cmp.Diff([]string{c.number, c.int64}, []string{got, gotInt}); d != "" {
			t.Errorf("%q (-want +got):\n%s", c.in, d)
		}
	}
}

func TestParseInt(t *testing.T) {
	for in, want := range map[string]string{"42": "42", "-7": "-7", "4x": "offset 1: 4x is not an integer", "": "offset 0: unexpected end of input, want a number"} {
		v, err := ParseInt([]byte(in))
		got := fmt.Sprint(v)
		if err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("ParseInt(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestAppendInts(t *testing.T) {
	cases := []struct {
		in   string
		want []int32
		err  string
	}{
		{in: `[]`, want: []int32{9}},
		{in: ` [ 1 , -2 ,3 ,	4 ] `, want: []int32{9, 1, -2, 3, 4}},
		{in: `[1,2147483648]`, err: "offset 3: integer 2147483648 out of range"},
		{in: `[1,]`, err: "offset 3: unexpected ']', want a number"},
		{in: `[1 2]`, err: "offset 3: unexpected '2', want ',' or ']' in array"},
		{in: `[1.5]`, err: "offset 1: 1.5 is not an integer"},
		{in: `[12`, err: "offset 3: unexpected end of input, want ',' or ']' in array"},
		{in: `null`, err: "offset 0: unexpected 'n', want '['"},
	}
	for _, c := range cases {
		s := New([]byte(c.in))
		got, err := AppendInts(&s, []int32{9})
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err == nil {
			err = s.End()
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
		}
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("%q (-want +got):\n%s", c.in, d)
		}
	}
}

func TestLiterals(t *testing.T) {
	s := New([]byte(` true false null nul tru`))
	t1, err1 := s.Bool()
	f, err2 := s.Bool()
	n := s.Null()
	n2 := s.Null()
	_, err3 := s.Bool()
	if !t1 || f || err1 != nil || err2 != nil || !n || n2 || err3 == nil {
		t.Errorf("got %v %v %v %v %v %v %v", t1, err1, f, err2, n, n2, err3)
	}
}

// TestObjectArray walks a document with Object and Array, checking the
// keys and indexes seen and where each value starts.
func TestObjectArray(t *testing.T) {
	doc := []byte(`{"a": [10, 20], "b\n": {}, "c": [], "d": {"e": null}}`)
	var got []string
	s := New(doc)
	err := s.Object(func(k Str) error {
		key, _ := Unquote(k.Raw)
		switch key {
		case "a":
			return s.Array(func(i int) error {
				v, err := s.Int64()
				got = append(got, fmt.Sprintf("a[%d]=%d", i, v))
				return err
			})
		case "c":
			return s.Array(func(int) error { t.Error("element in an empty array"); return nil })
		}
		v, err := s.Value()
		got = append(got, fmt.Sprintf("%q=%s", key, v))
		return err
	})
	if err == nil {
		err = s.End()
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a[0]=10", "a[1]=20", `"b\n"={}`, `"d"={"e": null}`}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestSkipErrors(t *testing.T) {
	cases := []struct{ in, err string }{
		{`{"a":1,}`, `offset 7: unexpected '}', want a string`},
		{`{"a" 1}`, `offset 5: unexpected '1', want ':'`},
		{`{"a":1 "b":2}`, `offset 7: unexpected '"', want ',' or '}' in object`},
		{`[1,2`, `offset 4: unexpected end of input, want ',' or ']' in array`},
		{`[tru]`, `offset 1: invalid literal, want true`},
		{`}`, `offset 0: unexpected '}', want a value`},
		{``, `offset 0: unexpected end of input, want a value`},
		{`[[[1]]]`, `offset 3: nested too deeply`},
		{`[[[]]] x`, `offset 7: unexpected data after the value`},
	}
	for _, c := range cases {
		s := New([]byte(c.in))
		s.MaxDepth = 2
		err := s.Skip()
		if err == nil {
			err = s.End()
		}
		if err == nil || err.Error() != c.err {
			t.Errorf("%q: err %v, want %s", c.in, err, c.err)
		}
	}
	s := New([]byte(`[[1]]`))
	s.MaxDepth = 2
	if err := s.Skip(); err != nil {
		t.Errorf("depth 2: %v", err)
	}
}

// FuzzAgainstEncodingJSON checks Skip, String, Unquote, Number and Int64
// against encoding/json on any input.
func FuzzAgainstEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,-2.5e3,true,false,null,{"b":"c"}],"d":""}`,
		`"caf\u00e9 \ud83d\ude00 \ud800 \"x\""`, "\"\xff\xfe plain\"", `-0.0e-0`, `9223372036854775808`, `-42`,
		`[1, 2 ,3]`, `[12345678,123456789012345678,1234567890123456789, -0 ,0]`, `[1,2147483648]`, `{"a" : {"b" : [ ] } }`, `01`, `[1,]`, `"\u12"`, `nul`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := New(b)
		s.MaxDepth = 1 << 20
		err := s.Skip()
		if err == nil {
			err = s.End()
		}
		if valid := json.Valid(b); (err == nil) != valid && !bytes.Contains(b, bytes.Repeat([]byte{'['}, 1000)) {
			t.Fatalf("Skip err %v, json.Valid %v: %q", err, valid, b)
		}
		first := bytes.TrimLeft(b, " \t\r\n")
		if len(first) == 0 {
			return
		}
		switch {
		case first[0] == '[':
			s := New(b)
			got, err := AppendInts(&s, []int64(nil))
			if err == nil {
				err = s.End()
			}
			var want []int64
			jerr := json.Unmarshal(b, &want)
			if (err == nil) != (jerr == nil) || err == nil && !cmp.Equal(got, want, cmpopts.EquateEmpty()) {
				t.Fatalf("AppendInts %v (%v), encoding/json %v (%v): %q", got, err, want, jerr, b)
			}
		case first[0] == '"':
			s := New(b)
			st, err := s.String()
			if err == nil {
				err = s.End()
			}
			var want string
			jerr := json.Unmarshal(b, &want)
			if (err == nil) != (jerr == nil) {
				t.Fatalf("String err %v, encoding/json err %v: %q", err, jerr, b)
			}
			if err != nil {
				return
			}
			got, err := Unquote(st.Raw)
			if err != nil || got != want {
				t.Fatalf("Unquote %q (%v), encoding/json %q", got, err, want)
			}
			if st.Escaped != bytes.Contains(st.Raw, []byte{'\\'}) {
				t.Fatalf("Escaped %v: %q", st.Escaped, b)
			}
		case first[0] == '-' || first[0] >= '0' && first[0] <= '9':
			s := New(b)
			_, err := s.Number()
			if err == nil {
				err = s.End()
			}
			if valid := json.Valid(b); (err == nil) != valid {
				t.Fatalf("Number err %v, json.Valid %v: %q", err, valid, b)
			}
			s = New(b)
			v, err := s.Int64()
			if err == nil {
				err = s.End()
			}
			var want int64
			jerr := json.Unmarshal(b, &want)
			if (err == nil) != (jerr == nil) || err == nil && v != want {
				t.Fatalf("Int64 %d (%v), encoding/json %d (%v): %q", v, err, want, jerr, b)
			}
		}
	})
}

// BenchmarkScanner skips a 256 KB chat request (the gateway's case) and
// reads an array of 512 integers (report's case).
func BenchmarkScanner(b *testing.B) {
	prompt := strings.Repeat("lorem ipsum dolor sit amet, ", 256<<10/28)
	body := []byte(fmt.Sprintf(`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":%q}]}`, prompt))
	b.Run("skip-256KB", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			s := New(body)
			if err := s.Skip(); err != nil {
				b.Fatal(err)
			}
		}
	})
	var ints []byte
	ints = append(ints, '[')
	for i := range 512 {
		if i > 0 {
			ints = append(ints, ',')
		}
		ints = fmt.Appendf(ints, "%d", 1_700_000_000_000_000+i*31_000_000)
	}
	ints = append(ints, ']')
	b.Run("ints-512", func(b *testing.B) {
		b.SetBytes(int64(len(ints)))
		b.ReportAllocs()
		dst := make([]int64, 0, 512)
		for b.Loop() {
			s := New(ints)
			var err error
			if dst, err = AppendInts(&s, dst[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestMemberElement: iterating with Member and Element reads what Object
// and Array read, and refuses what they refuse.
func TestMemberElement(t *testing.T) {
	walk := func(b []byte) (keys []string, n int, err error) {
		s := New(b)
		if err = s.Expect('{'); err != nil {
			return
		}
		for first := true; ; first = false {
			k, esc, ok, e := s.Member(first)
			if e != nil || !ok {
				return keys, n, e
			}
			if esc {
				u, _ := Unquote(k)
				k = []byte(u)
			}
			keys = append(keys, string(k))
			if s.Peek() != '[' {
				if err = s.Skip(); err != nil {
					return
				}
				continue
			}
			_ = s.Expect('[') // Peek saw it
			for first := true; ; first = false {
				more, e := s.Element(first)
				if e != nil || !more {
					if err = e; err != nil {
						return
					}
					break
				}
				n++
				if err = s.Skip(); err != nil {
					return
				}
			}
		}
	}
	for _, c := range []struct {
		in   string
		keys []string
		n    int
		bad  bool
	}{
		{`{}`, nil, 0, false},
		{` { "a" : [ 1 , 2 ] , "b\u0063" : {"x":[]} , "c":[] } `, []string{"a", "bc", "c"}, 2, false},
		{`{"a":1,}`, []string{"a"}, 0, true},
		{`{"a":1 "b":2}`, []string{"a"}, 0, true},
		{`{"a":[1,]}`, []string{"a"}, 2, true},
		{`{"a":[,1]}`, []string{"a"}, 1, true},
		{`{"a" 1}`, nil, 0, true},
		{`{,"a":1}`, nil, 0, true},
	} {
		keys, n, err := walk([]byte(c.in))
		if (err != nil) != c.bad || !slices.Equal(keys, c.keys) || n != c.n {
			t.Errorf("%s: keys %q, %d elements, err %v; want %q, %d, bad %v", c.in, keys, n, err, c.keys, c.n, c.bad)
		}
	}
}
