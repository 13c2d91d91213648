//go:build !unix

package earlysignal

// Handoff does nothing where signals are not caught early.
func Handoff() {}
