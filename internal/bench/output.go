package bench

import (
	"time"

	"github.com/tokentrace/tokentrace/internal/results"
)

// DefaultOutDir is the results folder used when none is given:
// ./results/<UTC timestamp>/.
func DefaultOutDir(now time.Time) string { return results.DefaultDir(now) }
