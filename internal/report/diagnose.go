package report

// diagnose runs every rule over the run, in order of severity.
func diagnose(a *analysis, rep *Report) []Finding {
	var out []Finding
	for _, rule := range rules {
		if f, ok := rule.check(a, rep); ok {
			f.Rule = rule.name
			out = append(out, f)
		}
	}
	return out
}

// rule is one diagnosis: check reads the run and returns a finding when the
// pattern it looks for is there.
type rule struct {
	name  string
	check func(a *analysis, rep *Report) (Finding, bool)
}

var rules = []rule{}
