package perfmodel

import (
	"fmt"
	"strings"

	"github.com/tokentrace/tokentrace/internal/field"
)

// UnknownNameError is returned by LookupGPU and LookupModel for a name the
// catalog lacks. It lists the known names and the nearest one.
type UnknownNameError struct {
	Kind    string // "GPU" or "model"
	Name    string
	Known   []string
	Nearest string
}

func (e *UnknownNameError) Error() string {
	return fmt.Sprintf("unknown %s %q; did you mean %q? known: %s",
		e.Kind, e.Name, e.Nearest, strings.Join(e.Known, ", "))
}

// normName folds a name for lookups (field.FoldName).
func normName(s string) string { return field.FoldName(s) }

// nearest returns the known name closest to name (field.Nearest).
func nearest(name string, known []string) string { return field.Nearest(name, known) }
