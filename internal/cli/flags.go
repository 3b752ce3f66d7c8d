package cli

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/field"
)

// flagGroup binds the fields of a typed configuration to flags, and
// remembers which flag sets which field. It is the one place a field's
// name (snake_case, as a domain package's *field.Error names it) becomes a
// flag's: the flag is the field with dashes, behind the group's prefix
// (bench's embedded engine binds the engine's flags as --sim-*). Several
// groups may share a FlagSet; each reports its own fields' errors.
//
// A group is created with newFlagGroup, filled by the bind* functions of
// flaggroups.go, and after parsing (and any config file) its finish hooks
// run once (finish) before the configuration is built.
type flagGroup struct {
	fs     *pflag.FlagSet
	prefix string          // prepended to every flag name, e.g. "sim-"
	usage  string          // prepended to every usage line
	skip   map[string]bool // flag names (without prefix) not bound
	fields map[string]string
	hooks  []func() error
}

// aliasOf is the annotation an alias flag carries: the canonical flag it
// sets.
const aliasOf = "tokentrace/alias-of"

// newFlagGroup returns a group binding onto fs. Flags whose names (without
// prefix) are in skip are not defined: their fields keep the value they
// had (bench leaves out the engine's own seed when it has one, simulate
// its workload's).
func newFlagGroup(fs *pflag.FlagSet, prefix, usage string, skip ...string) *flagGroup {
	g := &flagGroup{fs: fs, prefix: prefix, usage: usage, skip: map[string]bool{}, fields: map[string]string{}}
	for _, s := range skip {
		g.skip[s] = true
	}
	return g
}

// bind defines the flag name (behind the group's prefix, with the group's
// usage prefix) through define, unless the group skips it, and records
// which field it sets: the name with underscores.
func (g *flagGroup) bind(name, usage string, define func(fs *pflag.FlagSet, name, usage string)) {
	if g.skip[name] {
		return
	}
	g.fields[strings.ReplaceAll(name, "-", "_")] = g.prefix + name
	define(g.fs, g.prefix+name, g.usage+usage)
}

func (g *flagGroup) stringVar(p *string, name, usage string) {
	g.bind(name, usage, func(fs *pflag.FlagSet, n, u string) { fs.StringVar(p, n, *p, u) })
}

func (g *flagGroup) stringArrayVar(p *[]string, name, usage string) {
	g.bind(name, usage, func(fs *pflag.FlagSet, n, u string) { fs.StringArrayVar(p, n, *p, u) })
}

func (g *flagGroup) intVar(p *int, name, usage string) {
	g.bind(name, usage, func(fs *pflag.FlagSet, n, u string) { fs.IntVar(p, n, *p, u) })
}

func (g *flagGroup) int64Var(p *int64, name, usage string) {
	g.bind(name, usage, func(fs *pflag.FlagSet, n, u string) { fs.Int64Var(p, n, *p, u) })
}

func (g *flagGroup) uint64Var(p *uint64, name, usage string) {
	g.bind(name, usage, func(fs *pflag.FlagSet, n, u string) { fs.Uint64Var(p, n, *p, u) })
}

func (g *flagGroup) float64Var(p *float64, name, usage string) {
	g.bind(name, usage, func(fs *pflag.FlagSet, n, u string) { fs.Float64Var(p, n, *p, u) })
}

func (g *flagGroup) boolVar(p *bool, name, usage string) {
	g.bind(name, usage, func(fs *pflag.FlagSet, n, u string) { fs.BoolVar(p, n, *p, u) })
}

func (g *flagGroup) durationVar(p *time.Duration, name, usage string) {
	g.bind(name, usage, func(fs *pflag.FlagSet, n, u string) { fs.DurationVar(p, n, *p, u) })
}

// alias defines old as a hidden second spelling of the canonical flag
// name (both without prefix): it sets the same value. A deprecated alias
// prints a one-line notice naming the canonical flag when used.
func (g *flagGroup) alias(old, name string, deprecated bool) {
	canon := g.fs.Lookup(g.prefix + name)
	if canon == nil || g.skip[old] {
		return
	}
	a := &pflag.Flag{Name: g.prefix + old, Usage: canon.Usage, Value: canon.Value, DefValue: canon.DefValue,
		NoOptDefVal: canon.NoOptDefVal, Hidden: true,
		Annotations: map[string][]string{aliasOf: {canon.Name}}}
	if deprecated {
		a.Deprecated = "use --" + canon.Name
	}
	g.fs.AddFlag(a)
}

// legacy defines a hidden, deprecated flag that is not a plain alias (it
// sets part of a canonical setting); its value is folded in by a finish
// hook.
func (g *flagGroup) legacy(v pflag.Value, old, canonical, usage string) {
	if g.skip[canonical] {
		return
	}
	g.fs.AddFlag(&pflag.Flag{Name: g.prefix + old, Usage: usage, Value: v, DefValue: v.String(), Hidden: true,
		Deprecated: "use --" + g.prefix + canonical, Annotations: map[string][]string{aliasOf: {g.prefix + canonical}}})
}

// onFinish adds a hook run by finish.
func (g *flagGroup) onFinish(f func() error) { g.hooks = append(g.hooks, f) }

// finish runs the group's hooks (folding legacy spellings into their
// canonical settings) once flags and config files are applied.
func (g *flagGroup) finish() error {
	for _, h := range g.hooks {
		if err := h(); err != nil {
			return err
		}
	}
	return nil
}

// given reports whether the user set field, under its name or an alias,
// on the command line or in a config file.
func (g *flagGroup) given(field string) bool {
	name, ok := g.fields[field]
	return ok && flagGiven(g.fs, name)
}

// givenFields are the fields the user set in this group, sorted (a run's
// simulate.RunConfig.Given).
func (g *flagGroup) givenFields() []string {
	var out []string
	for f := range g.fields {
		if g.given(f) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// flagGiven reports whether name, or an alias of it, was set.
func flagGiven(fs *pflag.FlagSet, name string) bool {
	given := false
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed && (f.Name == name || slices.Contains(canonicalNames(f), name)) {
			given = true
		}
	})
	return given
}

// canonicalNames are the flags an alias sets, or the flag's own name.
func canonicalNames(f *pflag.Flag) []string {
	if a := f.Annotations[aliasOf]; len(a) > 0 {
		return a
	}
	return []string{f.Name}
}

// flagOf is the flag spelling of a field: --name when the group binds it,
// the field's own name otherwise.
func (g *flagGroup) flagOf(field string) string {
	if name, ok := g.fields[field]; ok {
		return "--" + name
	}
	return field
}

// flagError rewrites the first *field.Error in err under the flags' names
// ("rate 0: must be positive" becomes "--rate 0: must be positive"),
// keeping any context around it. Errors about fields the group does not
// bind are left as they are.
func (g *flagGroup) flagError(err error) error {
	var fe *field.Error
	if !errors.As(err, &fe) {
		return err
	}
	if _, ok := g.fields[fe.Field]; !ok {
		return err
	}
	return &renamedError{msg: strings.Replace(err.Error(), fe.Error(), fe.Render(g.flagOf), 1), err: err}
}

// renamedError is an error whose text names flags; it unwraps to the
// domain error.
type renamedError struct {
	msg string
	err error
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.err }
