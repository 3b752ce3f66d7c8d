package report

import (
	"encoding/json"
	"io"
)

// WriteJSON writes the report in its JSON form (schema in docs/report.md).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}
