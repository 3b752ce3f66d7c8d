package perfmodel

import (
	"fmt"
	"strings"
)

// DType is a numeric precision for weights, KV cache or compute.
type DType string

// The precisions the model knows.
const (
	BF16 DType = "bf16"
	FP16 DType = "fp16"
	FP8  DType = "fp8"
	INT8 DType = "int8"
	INT4 DType = "int4"
)

// DTypes lists every known precision, widest first.
var DTypes = []DType{BF16, FP16, FP8, INT8, INT4}

// ParseDType reads a precision name, accepting the usual aliases
// ("bfloat16", "float16", "half", "e4m3", "w4a16", ...), case-insensitively.
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "float16", "half", "f16":
		return FP16, nil
	case "fp8", "float8", "e4m3", "fp8_e4m3", "f8":
		return FP8, nil
	case "int8", "i8", "w8a8":
		return INT8, nil
	case "int4", "i4", "w4a16", "awq", "gptq":
		return INT4, nil
	}
	return "", fmt.Errorf("unknown dtype %q (known: bf16, fp16, fp8, int8, int4)", s)
}

// Bytes is the storage size of one element.
func (d DType) Bytes() float64 {
	switch d {
	case BF16, FP16:
		return 2
	case FP8, INT8:
		return 1
	case INT4:
		return 0.5
	}
	return 0
}

// Valid reports whether d is a known precision.
func (d DType) Valid() bool { return d.Bytes() > 0 }

// validKV reports whether d can be used for the KV cache.
func (d DType) validKV() bool { return d == BF16 || d == FP16 || d == FP8 || d == INT8 }
