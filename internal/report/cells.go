package report

import "fmt"

// BeforeCellLines says what bench did to the server before a sweep's
// cells (run.json's points): each distinct action with the number of cells
// it came before, then each cell where something failed.
func (r *Report) BeforeCellLines() []string {
	did := map[string]int{}
	var order, out []string
	for _, ph := range r.Phases {
		if ph.BeforeCell == "" {
			continue
		}
		if did[ph.BeforeCell] == 0 {
			order = append(order, ph.BeforeCell)
		}
		did[ph.BeforeCell]++
	}
	for _, d := range order {
		out = append(out, fmt.Sprintf("before %d of %d cells: %s", did[d], len(r.Phases), d))
	}
	for _, ph := range r.Phases {
		if ph.BeforeCellWarning != "" {
			out = append(out, fmt.Sprintf("warning: before %s: %s", ph.Name, ph.BeforeCellWarning))
		}
	}
	return out
}

// beforeCellsSection is the HTML sweep section's list of what was done to
// the server between cells.
const beforeCellsSection = `{{define "beforecells"}}{{with .BeforeCellLines}}<ul id="between-cells">{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}{{end}}
`
