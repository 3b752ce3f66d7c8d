//go:build !unix

package httplimit

func openFileLimit() int { return fallbackFileLimit }
