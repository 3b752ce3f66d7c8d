package field

import "math"

// NonNegative checks a numeric setting that may be 0 (often "the default"
// or "none"): a finite number, 0 or more. NaN, ±Inf and negatives name
// the field.
func NonNegative(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return Invalid(name, v, "must be a finite number, 0 or more")
	}
	return nil
}

// Positive checks a numeric setting for which 0 means nothing: a finite
// number above 0.
func Positive(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return Invalid(name, v, "must be a finite number above 0")
	}
	return nil
}

// Count checks an integer setting where 0 takes a default (or means none):
// 0 or more.
func Count(name string, v int) error {
	if v < 0 {
		return Invalid(name, v, "must not be negative (0 takes the default)")
	}
	return nil
}
