package report

// span returns, per group key, the first intended send and the last end
// (or last send for requests that never ended).
func span(rows []row, key func(*row) int) map[int][2]int64 {
	m := map[int][2]int64{}
	for i := range rows {
		r := &rows[i]
		last := max(r.end, r.firstTok, r.sent)
		k := key(r)
		s, ok := m[k]
		if !ok {
			s = [2]int64{r.intended, last}
		}
		s[0] = min(s[0], r.intended)
		s[1] = max(s[1], last)
		m[k] = s
	}
	return m
}

func (a *analysis) summary(rep *Report, warmup int) {
	s := &rep.Summary
	s.Requests = len(a.rows)
	s.Succeeded = len(a.ok)
	s.Failed = s.Requests - s.Succeeded
	s.Warmup = warmup
	s.TopErrors = a.topErrors
	for i := range a.rows {
		r := &a.rows[i]
		if r.flags&flagResent != 0 {
			s.Resent++
		}
		if !r.ok() {
			if s.Errors == nil {
				s.Errors = map[string]int{}
			}
			s.Errors[a.errKinds[r.errKind]]++
			continue
		}
		s.InputTokens += int64(r.input)
		s.OutputTokens += int64(r.output)
		s.SharedPrefixTokens += int64(r.shared)
		s.CachedTokens += int64(r.cached)
		if r.hasServer() {
			s.ServerSplit++
		}
		if r.flags&flagTruncated != 0 {
			s.Truncated++
		}
	}
	for _, sp := range span(a.rows, func(r *row) int { return int(r.src) }) {
		a.duration += sp[1] - sp[0]
	}
	s.DurationS = float64(a.duration) / 1e9
	if a.duration > 0 {
		s.ThroughputRPS = float64(s.Succeeded) / s.DurationS
		s.OutputTPS = float64(s.OutputTokens) / s.DurationS
		s.TotalTPS = float64(s.InputTokens+s.OutputTokens) / s.DurationS
	}
	s.OfferedRPS = offeredRate(a.rows, nil)
	s.CompletionRPS = completionRate(a.rows, nil)
}

// completionRate is (n − 1) / (last end − first end) over the successful
// rows that keep returns true for, per source, summed.
func completionRate(rows []row, keep func(*row) bool) float64 {
	return eventRate(rows, func(r *row) bool { return r.ok() && (keep == nil || keep(r)) },
		func(r *row) int64 { return r.end })
}

// offeredRate is (n − 1) / (last − first intended send) over the rows that
// keep returns true for (all when keep is nil), per source, summed.
func offeredRate(rows []row, keep func(*row) bool) float64 {
	return eventRate(rows, keep, func(r *row) int64 { return r.intended })
}

// eventRate is (n − 1) / (last − first instant at(r)) over the rows that
// keep returns true for (all when keep is nil), per source, summed.
func eventRate(rows []row, keep func(*row) bool, at func(*row) int64) float64 {
	type acc struct {
		n      int
		lo, hi int64
	}
	bySrc := map[uint16]*acc{}
	for i := range rows {
		r := &rows[i]
		if keep != nil && !keep(r) {
			continue
		}
		t := at(r)
		x := bySrc[r.src]
		if x == nil {
			x = &acc{lo: t, hi: t}
			bySrc[r.src] = x
		}
		x.n++
		x.lo, x.hi = min(x.lo, t), max(x.hi, t)
	}
	var rate float64
	for _, x := range bySrc {
		if x.n > 1 && x.hi > x.lo {
			rate += float64(x.n-1) / (float64(x.hi-x.lo) / 1e9)
		}
	}
	return rate
}
