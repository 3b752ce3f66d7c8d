package cli

import (
	"fmt"
)

// Exit statuses, the same for every command (docs/cli.md).
const (
	// ExitOK: the command did what it was asked (and every --slo held).
	ExitOK = 0
	// ExitFailed: the run could not happen or broke off (a server that is
	// unreachable, a file that cannot be written).
	ExitFailed = 1
	// ExitUsage: bad flags or bad input (a flag that does not parse, a
	// setting out of range, a config file or results that cannot be read);
	// nothing was run.
	ExitUsage = 2
	// ExitSLOFailed: the command ran and an SLO given with --slo failed.
	ExitSLOFailed = 3
	// ExitNoneMeets: plan searched and no configuration meets the SLOs
	// (it names the closest and by how much it misses).
	ExitNoneMeets = 4
	// ExitInterrupted: the run was stopped by Ctrl-C (SIGINT) or SIGTERM
	// before its end; what finished is written all the same (128 + SIGINT,
	// as shells report a process the signal ended).
	ExitInterrupted = 130
)

// ExitError carries a process exit status out of a command, with an optional
// message.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// usageError is err as bad input (exit status 2), with every field error
// in it named as the groups' flags (the first group binding the field).
func usageError(err error, groups ...*flagGroup) error {
	if err == nil {
		return nil
	}
	for _, g := range groups {
		if r := g.flagError(err); r != err {
			err = r
			break
		}
	}
	return &ExitError{Code: ExitUsage, Err: err}
}
