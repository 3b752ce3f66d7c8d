package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/route"
)

// Apply is what `tokentrace gateway apply` changes in a configuration
// file: the levers, and the pool and route they apply to ("" where the
// file has only one).
type Apply struct {
	Pool, Route string
	// Levers are LEVER=VALUE (ApplyLevers lists the names).
	Levers []string
}

// gatewayLever is one remedy the gateway owns: where it lives in the
// configuration and how its value is checked.
type gatewayLever struct {
	name, help string
	// route says it is a route's setting (else a pool's); keys is its
	// path under the pool or route.
	route bool
	keys  []string
	value func(v string) (any, error)
}

func intValue(v string) (any, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("%q is not a non-negative integer", v)
	}
	return n, nil
}

func boolValue(v string) (any, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return nil, fmt.Errorf("%q is not true or false", v)
	}
	return b, nil
}

// gatewayLevers are the remedies `gateway apply` writes.
var gatewayLevers = []gatewayLever{
	{name: "concurrency", help: "admission limit: requests in flight upstream (pools[].queue.concurrency; 0: unlimited)", keys: []string{"queue", "concurrency"}, value: intValue},
	{name: "max-queue", help: "admission limit: requests waiting, beyond which 429 (pools[].queue.max_size)", keys: []string{"queue", "max_size"}, value: intValue},
	{name: "balancer", help: "routing policy (pools[].balancer: " + strings.Join(route.Names, ", ") + ")", keys: []string{"balancer"}, value: func(v string) (any, error) {
		if !slices.Contains(route.Names, v) {
			return nil, fmt.Errorf("%q is not one of %s", v, strings.Join(route.Names, ", "))
		}
		return v, nil
	}},
	{name: "replicas", help: "replica set: URL,URL… (pools[].replicas; a new one copies the pool's first replica's other fields)", keys: []string{"replicas"}},
	{name: "max-max-tokens", help: "max-tokens cap, clamped (routes[].length.max_max_tokens, on_exceed: clamp; 0: none)", route: true, keys: []string{"length", "max_max_tokens"}, value: intValue},
	{name: "early-reject", help: "shedding: refuse a request whose predicted wait breaks its deadline (routes[].early_reject)", route: true, keys: []string{"early_reject"}, value: boolValue},
	{name: "deadline-ttft", help: "priority by deadline: the default TTFT deadline (routes[].deadline_ttft; 0: none)", route: true, keys: []string{"deadline_ttft"}, value: func(v string) (any, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%q is not a non-negative duration", v)
		}
		return v, nil
	}},
}

// ApplyLevers lists the levers `gateway apply` takes, with what each sets.
func ApplyLevers() []string {
	out := make([]string, len(gatewayLevers))
	for i, l := range gatewayLevers {
		out[i] = l.name + ": " + l.help
	}
	return out
}

// ApplyConfig rewrites a configuration file's content with a's levers
// applied, keeping its comments and order, and checks the result as the
// gateway loads it (ParseConfig): the running gateway reloads it
// (Watch). It returns the new content and one line per change.
func ApplyConfig(data []byte, a Apply) ([]byte, []string, error) {
	if len(a.Levers) == 0 {
		return nil, nil, field.Invalid("levers", "", "give at least one LEVER=VALUE")
	}
	var doc yaml.MapSlice
	cm := yaml.CommentMap{}
	if err := yaml.UnmarshalWithOptions(data, &doc, yaml.UseOrderedMap(), yaml.CommentToMap(cm)); err != nil {
		return nil, nil, yamlError(data, err)
	}
	var notes []string
	for _, s := range a.Levers {
		k, v, ok := strings.Cut(s, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		i := slices.IndexFunc(gatewayLevers, func(l gatewayLever) bool { return l.name == k })
		if !ok || i < 0 || v == "" {
			names := make([]string, len(gatewayLevers))
			for j, l := range gatewayLevers {
				names[j] = l.name
			}
			return nil, nil, field.Invalid("lever", s, "want LEVER=VALUE, LEVER one of %s", strings.Join(names, ", "))
		}
		note, err := applyLever(&doc, gatewayLevers[i], v, a)
		if err != nil {
			return nil, nil, field.Invalid("lever", s, "%v", err)
		}
		notes = append(notes, note)
	}
	out, err := yaml.MarshalWithOptions(doc, yaml.WithComment(cm))
	if err != nil {
		return nil, nil, fmt.Errorf("write config: %w", err)
	}
	if _, err := ParseConfig(out); err != nil {
		return nil, nil, fmt.Errorf("the configuration with the change: %w", err)
	}
	return out, notes, nil
}

// ErrWrite marks ApplyFile's failures to write the file (not its input's).
var ErrWrite = errors.New("write config")

// ApplyFile applies a to the configuration file at path, replacing it in
// one rename (a running gateway's Watch never reads it half-written): the
// gateway reloads it within its reload interval. A change that does not
// load leaves the file as it was.
func ApplyFile(path string, a Apply) ([]string, error) {
	data, err := field.ReadFile(path, 0)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	out, notes, err := ApplyConfig(data, a)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".gateway-*.yaml")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWrite, err)
	}
	tmp := f.Name()
	_, err = f.Write(out)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, mode)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp) // best effort: path is untouched
		return nil, fmt.Errorf("%w: %w", ErrWrite, err)
	}
	return notes, nil
}

// applyLever sets one lever in the selected pool or route of doc.
func applyLever(doc *yaml.MapSlice, l gatewayLever, v string, a Apply) (string, error) {
	list, want, what := "pools", a.Pool, "pool"
	nameKey := "name"
	if l.route {
		list, want, what, nameKey = "routes", a.Route, "route", "model"
	}
	items, _ := get(*doc, list).([]any)
	var picked []int
	for i, it := range items {
		m, _ := it.(yaml.MapSlice)
		if want == "" || fmt.Sprint(get(m, nameKey)) == want {
			picked = append(picked, i)
		}
	}
	switch {
	case len(picked) == 0:
		return "", fmt.Errorf("the configuration has no %s %q", what, want)
	case len(picked) > 1:
		return "", fmt.Errorf("the configuration has %d %ss: name one (--%s)", len(picked), what, what)
	}
	m, _ := items[picked[0]].(yaml.MapSlice)
	var val any
	var err error
	if l.name == "replicas" {
		val, err = replicaSet(m, v)
	} else {
		val, err = l.value(v)
	}
	if err != nil {
		return "", err
	}
	old := fmt.Sprint(getPath(m, l.keys))
	if rs, ok := get(m, "replicas").([]any); ok && l.name == "replicas" {
		old = fmt.Sprintf("%d", len(rs))
	}
	m = setPath(m, l.keys, val)
	if l.name == "max-max-tokens" {
		m = setPath(m, []string{"length", "on_exceed"}, "clamp")
	}
	items[picked[0]] = m
	*doc = set(*doc, list, items)
	if l.name == "replicas" {
		v = fmt.Sprintf("%d", len(val.([]any))) // the URLs may hold credentials
	}
	return fmt.Sprintf("%s %s: %s %s → %s", what, get(m, nameKey), strings.Join(l.keys, "."), old, v), nil
}

// replicaSet is the replica list URL,URL… of pool m: each new replica
// copies the first's other fields (kind, models, key), one already listed
// is kept as it was.
func replicaSet(m yaml.MapSlice, v string) (any, error) {
	old, _ := get(m, "replicas").([]any)
	var out []any
	for _, u := range strings.Split(v, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			return nil, fmt.Errorf("an empty replica URL in %q", v)
		}
		i := slices.IndexFunc(old, func(r any) bool { rm, _ := r.(yaml.MapSlice); return fmt.Sprint(get(rm, "url")) == u })
		if i >= 0 {
			out = append(out, old[i])
			continue
		}
		r := yaml.MapSlice{{Key: "url", Value: u}}
		if len(old) > 0 {
			first, _ := old[0].(yaml.MapSlice)
			for _, it := range first {
				if it.Key != "url" {
					r = append(r, it)
				}
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func get(m yaml.MapSlice, k string) any {
	for _, it := range m {
		if fmt.Sprint(it.Key) == k {
			return it.Value
		}
	}
	return nil
}

func set(m yaml.MapSlice, k string, v any) yaml.MapSlice {
	for i, it := range m {
		if fmt.Sprint(it.Key) == k {
			m[i].Value = v
			return m
		}
	}
	return append(m, yaml.MapItem{Key: k, Value: v})
}

func getPath(m yaml.MapSlice, keys []string) any {
	if len(keys) == 1 {
		if v := get(m, keys[0]); v != nil {
			return v
		}
		return "unset"
	}
	sub, _ := get(m, keys[0]).(yaml.MapSlice)
	return getPath(sub, keys[1:])
}

func setPath(m yaml.MapSlice, keys []string, v any) yaml.MapSlice {
	if len(keys) == 1 {
		return set(m, keys[0], v)
	}
	sub, _ := get(m, keys[0]).(yaml.MapSlice)
	return set(m, keys[0], setPath(sub, keys[1:], v))
}
