package racedetect_test

import (
	"runtime/debug"
	"testing"

	"github.com/tokentrace/tokentrace/internal/racedetect"
)

// TestEnabledIsTheBuilds: Enabled is what the binary's build settings
// record (-race=true under go test -race, absent otherwise).
func TestEnabledIsTheBuilds(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build information in this binary")
	}
	race := false
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			race = s.Value == "true"
		}
	}
	if racedetect.Enabled != race {
		t.Errorf("racedetect.Enabled = %v, the build's -race setting %v", racedetect.Enabled, race)
	}
}
