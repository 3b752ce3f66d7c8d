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
	// MXFP4 is the OCP microscaling 4-bit float: E2M1 elements with one
	// 8-bit power-of-two scale per 32 (gpt-oss's released weights).
	MXFP4 DType = "mxfp4"
	// NVFP4 is NVIDIA's 4-bit float: E2M1 elements with one FP8 scale per
	// 16 (Blackwell's FP4 tensor cores; NVIDIA's NVFP4 checkpoints).
	NVFP4 DType = "nvfp4"
)

// DTypes lists every known precision, widest first.
var DTypes = []DType{BF16, FP16, FP8, INT8, NVFP4, MXFP4, INT4}

// FP4 reports whether d is a 4-bit float format (MXFP4, NVFP4).
func (d DType) FP4() bool { return d == MXFP4 || d == NVFP4 }

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
	case "mxfp4", "mx-fp4":
		return MXFP4, nil
	case "nvfp4", "nv-fp4":
		return NVFP4, nil
	}
	return "", fmt.Errorf("unknown dtype %q (known: bf16, fp16, fp8, int8, int4, mxfp4, nvfp4)", s)
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
	case MXFP4:
		return 0.5 + 1.0/32 // a scale byte per 32 elements
	case NVFP4:
		return 0.5 + 1.0/16 // an FP8 scale per 16 elements
	}
	return 0
}

// Valid reports whether d is a known precision.
func (d DType) Valid() bool { return d.Bytes() > 0 }

// validKV reports whether d can be used for the KV cache.
func (d DType) validKV() bool { return d == BF16 || d == FP16 || d == FP8 || d == INT8 }
