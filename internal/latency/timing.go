package latency

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// HopStage is one stage a hop on the request's path reported: its hop, its
// name within the hop (app.retrieval is hop app, name retrieval;
// server_queue is hop server, name server_queue) and its duration.
type HopStage struct {
	Hop  Hop    `json:"hop"`
	Name string `json:"name"`
	NS   int64  `json:"ns"`
}

// TimingName is the stage's Server-Timing name, the one Split reads back:
// the bare name for the gateway's names and for the server's (unless bare
// it would read as another hop's), else "hop.name".
func (s HopStage) TimingName() TimingName {
	n := TimingName(s.Name)
	switch {
	case s.Hop == HopGateway && gatewayNames[n]:
		return n
	case s.Hop == HopServer && !gatewayNames[n] && !strings.Contains(s.Name, "."):
		return n
	}
	return Qualify(s.Hop, s.Name)
}

// AppendTiming appends a Server-Timing metric "name;dur=MS" (milliseconds
// with three decimals, as tokentrace's hops send them), after ", " when b
// is not empty.
func AppendTiming(b []byte, name TimingName, ns int64) []byte {
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	b = append(b, name...)
	b = append(b, ";dur="...)
	return strconv.AppendFloat(b, float64(ns)/1e6, 'f', 3, 64)
}

// ForwardTiming is what a hop passes on of its upstream's Server-Timing
// values (its header's and its trailer's, read by ParseTiming): every
// stage of a hop other than self, under its wire name, as one value — the
// former names rewritten to today's, so that no name reads as the
// forwarding hop's own. Empty when there is none.
func ForwardTiming(self Hop, v TimingValues) string {
	stages, _ := ParseTiming(v)
	var b []byte
	for _, s := range stages {
		if s.Hop != self {
			b = AppendTiming(b, s.TimingName(), s.NS)
		}
	}
	return string(b)
}

// TimingValues are a response's Server-Timing values by where they came
// from, in the order a client sees them: the header, the final event of a
// stream (an SSE comment ": server-timing VALUE" before [DONE], read only
// when there is no trailer), the trailer. Each is a list of field values
// ("a;dur=1, b;dur=2").
type TimingValues struct {
	Header, Final, Trailer []string
}

// Empty reports whether there are no values at all.
func (v TimingValues) Empty() bool {
	return len(v.Header) == 0 && len(v.Final) == 0 && len(v.Trailer) == 0
}

// All is every value, header first, then the final event's, then the
// trailer's.
func (v TimingValues) All() []string {
	out := make([]string, 0, len(v.Header)+len(v.Final)+len(v.Trailer))
	out = append(out, v.Header...)
	out = append(out, v.Final...)
	return append(out, v.Trailer...)
}

// Bounds of what ParseTiming keeps.
const (
	// MaxTimingNotes bounds the notes kept for one response.
	MaxTimingNotes = 8
	// maxNoteLen bounds one note's length in bytes.
	maxNoteLen = 200
	// maxTimingMS is the largest dur read, in milliseconds (about 11.6
	// days); larger values are noted and skipped.
	maxTimingMS = 1e9
)

// timingEntry is one parsed Server-Timing metric.
type timingEntry struct {
	name   string // lower-cased
	dur    string // the dur parameter's value, unquoted
	hasDur bool
	desc   string // the desc parameter's value, unquoted
}

// scanTiming walks one Server-Timing field value (W3C Server Timing:
// metric *( "," metric ), metric = name *( ";" param ), param = name "="
// ( token / quoted-string )). Each syntactically valid metric goes to
// emit; each malformed one to bad, with the text skipped (up to the next
// comma outside quotes). Names are lower-cased.
func scanTiming(v string, emit func(timingEntry), bad func(text, why string)) {
	i := 0
	for i < len(v) {
		start := i
		e, why, end := scanMetric(v, i)
		if why != "" {
			end = skipMetric(v, start)
			if text := strings.TrimSpace(v[start:end]); text != "" {
				bad(text, why)
			}
		} else if e.name != "" {
			emit(e)
		}
		i = end
		if i < len(v) && v[i] == ',' {
			i++
		}
	}
}

// scanMetric reads one metric from v[i:], up to (not past) the comma that
// ends it; why is non-empty when it is malformed.
func scanMetric(v string, i int) (e timingEntry, why string, end int) {
	i = skipOWS(v, i)
	j := scanToken(v, i)
	name := v[i:j]
	i = skipOWS(v, j)
	if name == "" {
		if i >= len(v) || v[i] == ',' {
			return e, "", i // an empty list element, allowed
		}
		return e, "no metric name", i
	}
	e.name = strings.ToLower(name)
	for i < len(v) && v[i] == ';' {
		i = skipOWS(v, i+1)
		j = scanToken(v, i)
		pname := v[i:j]
		i = skipOWS(v, j)
		if pname == "" {
			return e, "a parameter without a name", i
		}
		var val string
		if i < len(v) && v[i] == '=' {
			i = skipOWS(v, i+1)
			if i < len(v) && v[i] == '"' {
				s, k, ok := scanQuoted(v, i)
				if !ok {
					return e, "an unterminated quoted string", len(v)
				}
				val, i = s, k
			} else {
				j = scanToken(v, i)
				val, i = v[i:j], j
			}
			i = skipOWS(v, i)
		}
		switch {
		case strings.EqualFold(pname, "dur") && !e.hasDur: // the first dur counts, as the spec says
			e.dur, e.hasDur = val, true
		case strings.EqualFold(pname, "desc") && e.desc == "":
			e.desc = val
		}
	}
	if i < len(v) && v[i] != ',' {
		return e, fmt.Sprintf("unexpected %q", v[i]), i
	}
	return e, "", i
}

// skipMetric returns the index of the comma (outside quotes) that ends
// the metric starting at i, or len(v).
func skipMetric(v string, i int) int {
	quoted := false
	for ; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			return i
		}
	}
	return len(v)
}

func skipOWS(v string, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	return i
}

// scanToken returns the end of the RFC 9110 token starting at i.
func scanToken(v string, i int) int {
	for i < len(v) && isTchar(v[i]) {
		i++
	}
	return i
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// scanQuoted reads the quoted-string at v[i] (a '"'), returning its
// unescaped text and the index after the closing quote.
func scanQuoted(v string, i int) (string, int, bool) {
	var b strings.Builder
	for k := i + 1; k < len(v); k++ {
		switch c := v[k]; c {
		case '\\':
			if k+1 < len(v) {
				k++
				b.WriteByte(v[k])
			}
		case '"':
			return b.String(), k + 1, true
		default:
			b.WriteByte(c)
		}
	}
	return "", len(v), false
}

// parseDur reads a dur value in milliseconds into nanoseconds; why says
// what is wrong with it.
func parseDur(s string) (ns int64, why string) {
	ms, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	switch {
	case err != nil && !isRangeErr(err):
		return 0, "dur is not a number"
	case math.IsNaN(ms):
		return 0, "dur is not a number"
	case ms < 0:
		return 0, "dur is negative"
	case ms > maxTimingMS || err != nil:
		return 0, "dur is out of range"
	}
	return int64(math.Round(ms * 1e6)), ""
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// ParseTiming reads every stage the hops on a request's path reported in
// its Server-Timing values, with a note for each thing it set aside, so
// that bad input never corrupts the split (docs/metrics.md, "Hops"):
//
//   - a malformed entry, or a dur that is not a non-negative number of
//     milliseconds up to 10⁹, is skipped and noted; an entry without dur
//     is no stage and is skipped silently;
//   - a stage reported twice in one place (the header, the final event or
//     the trailer) is noted and its later value kept; a stage repeated in
//     another place with the same value (a trailer repeating the header) is
//     the same report; with another value the later place's is kept, and
//     noted.
//
// Stages are grouped by hop in the order the hops first appear (each hop
// lists its own stages before those it passes on from its upstream, so
// that is path order), and within a hop in the order they first appear.
// The former names are read as SplitServerTiming reads them.
func ParseTiming(v TimingValues) (stages []HopStage, notes []string) {
	if len(v.Trailer) > 0 {
		// The final event stands in for the trailer for clients that
		// cannot read trailers; it was written just before the end (the
		// last write is not in it), so the trailer supersedes it.
		v.Final = nil
	}
	places := [...][]string{v.Header, v.Final, v.Trailer}
	placeNames := [...]string{"header", "final event", "trailer"}
	behindGateway := false
	for _, list := range places {
		for _, s := range list {
			scanTiming(s, func(e timingEntry) {
				behindGateway = behindGateway || TimingName(e.name) == TimingGatewayIn
			}, func(string, string) {})
		}
	}
	var from []int // where each stage's value came from
	var n noter
	for place, list := range places {
		for _, s := range list {
			scanTiming(s, func(e timingEntry) {
				if !e.hasDur {
					return
				}
				ns, why := parseDur(e.dur)
				if why != "" {
					n.add(fmt.Sprintf("server-timing %s: %s;dur=%s: %s; skipped", placeNames[place], e.name, e.dur, why))
					return
				}
				hop, name := formerName(TimingName(e.name), behindGateway).Split()
				i := 0
				for i < len(stages) && (stages[i].Hop != hop || stages[i].Name != name) {
					i++
				}
				switch {
				case i == len(stages):
					stages = append(stages, HopStage{Hop: hop, Name: name, NS: ns})
					from = append(from, place)
					return
				case from[i] == place:
					n.add(fmt.Sprintf("server-timing %s: %s reported twice (%s, then %s ms); the later kept",
						placeNames[place], e.name, fmtMS(stages[i].NS), fmtMS(ns)))
				case stages[i].NS != ns:
					n.add(fmt.Sprintf("server-timing: %s is %s ms in the %s, %s ms in the %s; the %s's kept",
						e.name, fmtMS(stages[i].NS), placeNames[from[i]], fmtMS(ns), placeNames[place], placeNames[place]))
				}
				stages[i].NS, from[i] = ns, place
			}, func(text, why string) {
				n.add(fmt.Sprintf("server-timing %s: malformed entry %q (%s); skipped", placeNames[place], text, why))
			})
		}
	}
	// Group by hop, hops in order of first appearance.
	var hops []Hop
	for _, s := range stages {
		if !slices.Contains(hops, s.Hop) {
			hops = append(hops, s.Hop)
		}
	}
	slices.SortStableFunc(stages, func(a, b HopStage) int {
		return slices.Index(hops, a.Hop) - slices.Index(hops, b.Hop)
	})
	return stages, n.notes
}

// formerName maps the former names onto today's: "queue" is a gateway's
// own queue behind a gateway (gateway_in present), else the server's;
// "decode" alone (no gateway) is a server's decode.
func formerName(n TimingName, behindGateway bool) TimingName {
	switch n {
	case timingFormerQueue:
		if behindGateway {
			return TimingGatewayQueue
		}
		return TimingServerQueue
	case TimingDecode:
		if !behindGateway {
			return TimingServerDecode
		}
	}
	return n
}

// fmtMS formats nanoseconds as milliseconds with three decimals.
func fmtMS(ns int64) string { return strconv.FormatFloat(float64(ns)/1e6, 'f', 3, 64) }

// noter collects bounded notes.
type noter struct{ notes []string }

func (n *noter) add(s string) {
	if len(n.notes) >= MaxTimingNotes {
		return
	}
	if len(s) > maxNoteLen {
		s = strings.ToValidUTF8(s[:maxNoteLen], "") + "…"
	}
	n.notes = append(n.notes, s)
}
