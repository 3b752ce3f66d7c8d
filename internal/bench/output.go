package bench

import (
	"time"

	"github.com/tokentrace/tokentrace/internal/results"
)

// Files of a results folder (internal/results writes them, for bench and
// simulate alike).
const (
	RequestsFile = results.RequestsFile
	SummaryFile  = results.SummaryFile
	CommandFile  = results.CommandFile
	ConfigFile   = results.ConfigFile
)

// DefaultOutDir is the results folder used when none is given:
// ./results/<UTC timestamp>/.
func DefaultOutDir(now time.Time) string { return results.DefaultDir(now) }
