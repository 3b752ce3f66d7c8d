package field

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Error is an invalid setting. Its message may name other fields as
// {name}; Render writes them (and Field) in the caller's spelling.
type Error struct {
	// Field is the setting's name, snake_case.
	Field string
	// Value is the value as given ("" when not worth repeating).
	Value string
	// Err says why the value is wrong.
	Err error
	// Refs are the other fields the message names as {name}.
	Refs []string
}

var refPattern = regexp.MustCompile(`\{([a-z][a-z0-9_]*)\}`)

// Errorf returns an error about field; format may name other fields as
// {name}.
func Errorf(field, format string, args ...any) *Error {
	return &Error{Field: field, Err: fmt.Errorf(format, args...), Refs: refs(format)}
}

// Invalid returns an error about field's value (strings are quoted);
// format may name other fields as {name}.
func Invalid(field string, value any, format string, args ...any) *Error {
	e := Errorf(field, format, args...)
	e.Value = showValue(value)
	return e
}

// Wrap returns err as an error about field, or nil when err is nil. An
// *Error already inside err is left as it is (it names its own field).
func Wrap(field string, err error) error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		return err
	}
	return &Error{Field: field, Err: err}
}

func refs(format string) []string {
	var out []string
	for _, m := range refPattern.FindAllStringSubmatch(format, -1) {
		out = append(out, m[1])
	}
	return out
}

func showValue(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v)
}

// Error renders the fields under their own names: "rate 0: must be …".
func (e *Error) Error() string { return e.Render(func(f string) string { return f }) }

// Unwrap returns the reason.
func (e *Error) Unwrap() error { return e.Err }

// Render writes the error with every field (its own and the ones its
// message names) spelled by name, e.g. as a command-line flag.
func (e *Error) Render(name func(field string) string) string {
	msg := ""
	if e.Err != nil {
		msg = e.Err.Error()
	}
	for _, r := range e.Refs {
		msg = strings.ReplaceAll(msg, "{"+r+"}", name(r))
	}
	head := name(e.Field)
	if e.Value != "" {
		head += " " + e.Value
	}
	if msg == "" {
		return head + ": invalid"
	}
	return head + ": " + msg
}
