package jsonscan

import (
	"unicode/utf16"
	"unicode/utf8"
)

// Unquote returns the value of a string's raw content (Str.Raw) as
// encoding/json decodes it: escapes resolved, a \u surrogate pair joined,
// and a lone surrogate or invalid UTF-8 replaced by U+FFFD.
func Unquote(raw []byte) (string, error) {
	plain := true
	for i := 0; i < len(raw) && plain; {
		c := raw[i]
		switch {
		case c == '\\' || c == '"' || c < 0x20:
			plain = false
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n == 1 {
				plain = false
			}
			i += n
		}
	}
	if plain {
		return string(raw), nil
	}
	b, err := AppendUnquote(make([]byte, 0, len(raw)+8), raw)
	return string(b), err
}

// AppendUnquote appends the value of a string's raw content to dst, as
// Unquote.
func AppendUnquote(dst, raw []byte) ([]byte, error) {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			if i+1 >= len(raw) {
				return dst, &SyntaxError{Offset: i, Msg: "bad escape in string"}
			}
			switch e := raw[i+1]; e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := rune(-1)
				if i+6 <= len(raw) {
					r = hex4(raw[i+2 : i+6])
				}
				if r < 0 {
					return dst, &SyntaxError{Offset: i, Msg: "bad \\u escape in string"}
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						r2 = hex4(raw[i+2 : i+6])
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						dst = utf8.AppendRune(dst, d)
						i += 6
						continue
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default:
				return dst, &SyntaxError{Offset: i, Msg: "bad escape in string"}
			}
			i += 2
		case c == '"' || c < 0x20:
			return dst, &SyntaxError{Offset: i, Msg: "invalid character in string"}
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			dst = utf8.AppendRune(dst, r)
			i += n
		}
	}
	return dst, nil
}
