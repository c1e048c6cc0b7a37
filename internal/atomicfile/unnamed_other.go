//go:build !linux

package atomicfile

import (
	"errors"
	"os"
)

// errNoUnnamed is openUnnamed's answer: only Linux has O_TMPFILE.
var errNoUnnamed = errors.New("atomicfile: no unnamed temporary files here")

// unnamedOff mirrors the Linux test switch; unnamed files are always off.
var unnamedOff bool

// openUnnamed always fails here: the caller makes a named temporary file.
func openUnnamed(string) (*os.File, error) { return nil, errNoUnnamed }

// linkUnnamed is never reached here (openUnnamed always fails).
func linkUnnamed(*os.File, string) error { return errNoUnnamed }
