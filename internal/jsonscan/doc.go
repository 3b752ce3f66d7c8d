// Package jsonscan is a small JSON lexer over a byte slice: white space,
// strings (as raw spans, with unescaping on request), numbers and integers
// with overflow checks, the literals true, false and null, object and array
// iteration, and skipping any value under a depth limit. Callers walk a
// document themselves and read only the fields they need. Reading allocates
// nothing (only Unquote of an escaped string, and errors, do); errors carry
// the byte offset.
//
// Everything it accepts is valid JSON as encoding/json reads it, and values
// it returns (Unquote, Int64) equal encoding/json's.
//
// It imports nothing of this module (standard library only).
package jsonscan
