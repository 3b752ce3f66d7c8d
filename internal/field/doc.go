// Package field names the setting an error is about. Domain packages take
// typed configurations and report a bad one with an *Error carrying the
// field's name (snake_case, as in config files: "max_num_seqs"), the value
// as given, and why; the command line maps the field to its flag name in
// one place, so a package never needs to know how a user spelled a setting.
//
// It imports only the standard library, so every package may use it.
//
// It imports nothing of this module (standard library only), so every
// package may use it.
package field
