// Package cli holds tokentrace's command line: flags (one name per concept,
// each defined once in flaggroups.go and bound by every command that takes
// it), config files, process settings, exit statuses, and the mapping from
// the domain packages' field errors to flag names. One file per
// subcommand turns flags into a typed configuration and calls the package
// that does the work; no domain logic lives here, and no domain package
// imports cobra or pflag (imports_test.go checks it).
//
// It is the composition root: it may import every package of this module,
// and nothing but cmd/tokentrace imports it.
package cli
