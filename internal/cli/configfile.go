package cli

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/redact"
)

// applyConfigFile reads a YAML file of flag-named keys (underscores may
// stand for dashes) and sets every flag of fs the command line did not set
// (under any spelling). An unknown key, a nested value or a value the flag
// rejects is an error; a deprecated spelling is taken, with a notice on
// warn.
func applyConfigFile(path string, fs *pflag.FlagSet, warn io.Writer) error {
	data, err := field.ReadFile(path, 0)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var kv map[string]any
	if err := yaml.Unmarshal(data, &kv); err != nil {
		// The library's error quotes the lines around the problem, which
		// may hold a credential: keep the position and the problem only,
		// masked as the gateway's configuration errors are, and do not
		// wrap it (nothing can print its excerpt later).
		return fmt.Errorf("config file %s: %s", path, redact.Quoting(yaml.FormatError(err, false, false), string(data)))
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := strings.ReplaceAll(k, "_", "-")
		f := fs.Lookup(name)
		if f == nil || name == "config" {
			return fmt.Errorf("config file %s: unknown key %q", path, k)
		}
		if slices.ContainsFunc(canonicalNames(f), func(n string) bool { return flagGiven(fs, n) }) {
			continue // the command line wins
		}
		v, err := configValue(kv[k])
		if err != nil {
			return fmt.Errorf("config file %s: key %q %w", path, k, err)
		}
		if err := f.Value.Set(v); err != nil {
			return fmt.Errorf("config file %s: %s: %w", path, k, err)
		}
		f.Changed = true
		if f.Deprecated != "" {
			fmt.Fprintf(warn, "config file %s: key %q is deprecated, %s\n", path, k, f.Deprecated)
		}
	}
	return nil
}

// configValue is a YAML scalar as a flag's text.
func configValue(x any) (string, error) {
	switch x := x.(type) {
	case map[string]any, []any:
		return "", fmt.Errorf("must be a single value")
	case nil:
		return "", fmt.Errorf("has no value")
	case string:
		return x, nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	}
	return fmt.Sprint(x), nil
}
